//! What each command's manual page says beyond clap's help: a longer DESCRIPTION, EXIT
//! STATUS, ENVIRONMENT, EXAMPLES and more SEE ALSO, in roff. Kept here, not in clap's
//! `long_about`, so that `--help` stays short; the OPTIONS come from clap.
//!
//! The exit codes agree with README ("Exit codes") and DESIGN: a relayed command's own
//! status (128+N for signal N), 1 for a refusal or a wardcell error, 2 for a usage
//! error, 124 the time limit, 126 not executable, 127 not found. A test checks every
//! page has every section.

/// One page's prose. `page` is the file's stem: `wardcell-logs-show`.
pub struct Prose {
    pub page: &'static str,
    pub description: &'static str,
    pub exit: &'static str,
    pub environment: &'static str,
    pub examples: &'static str,
    /// Pages named in SEE ALSO besides wardcell(1) and wardcell-zones.toml(5).
    pub see_also: &'static [&'static str],
}

/// A host command's exit status.
const EXIT_HOST: &str = r"0 on success; 1 for a refusal or a wardcell error (one line on standard error,
starting with \fBerror:\fR); 2 for a usage error.
";

/// A command relayed into a sandbox (`run`, `zone enter`).
const EXIT_RELAYED: &str = r"The command's own exit status, or 128+\fIN\fR when signal \fIN\fR ended it;
1 for a refusal or a wardcell error (one line on standard error, starting with
\fBerror:\fR); 2 for a usage error; 124 when the profile's time limit
(\fBlimits.time\fR) ended the command; 126 when the command is not executable; 127 when
it is not found.
";

/// Commands that read the configuration on the host.
const ENV_CONFIG: &str = r"
.TP
\fBXDG_CONFIG_HOME\fR, \fBHOME\fR
Where the user's \fIzones.toml\fR is: \fI$XDG_CONFIG_HOME/wardcell/zones.toml\fR
(default \fI~/.config/wardcell/zones.toml\fR), unless \fB\-\-config\fR names a file.
.TP
\fBWARDCELL_LOG\fR
\fBoff\fR, \fBerror\fR, \fBwarn\fR, \fBinfo\fR, \fBdebug\fR or \fBtrace\fR: print what
wardcell does at that level to standard error. Another value is a usage error.
";

/// Commands that read the state directory (logs, approvals).
const ENV_STATE: &str = r"
.TP
\fBXDG_STATE_HOME\fR, \fBHOME\fR
Where the audit logs and the approval queue are: \fI$XDG_STATE_HOME/wardcell\fR
(default \fI~/.local/state/wardcell\fR).
.TP
\fBWARDCELL_LOG\fR
\fBoff\fR, \fBerror\fR, \fBwarn\fR, \fBinfo\fR, \fBdebug\fR or \fBtrace\fR: print what
wardcell does at that level to standard error.
";

/// Commands that work inside a zone.
const ENV_ZONE: &str = r"
.TP
\fBWARDCELL_SANDBOX\fR, \fBWARDCELL_ZONE\fR, \fBWARDCELL_ZONE_SOCKET\fR
Set in every sandbox started in a zone: the zone's name and the supervisor's socket,
which answers. They choose what is offered; they are no boundary (the broker decides
every entry).
";

pub const ALL: &[Prose] = &[
    Prose {
        page: "wardcell",
        description: r"\fBwardcell\fR runs a command, typically a coding agent, in a sandbox built
from nothing (namespaces, Landlock, seccomp), whose permissions come from a named
\fBzone\fR of \fIzones.toml\fR: which files it may read and write, which hosts it may
reach through its zone's proxy, which environment passes. From inside, the command may
ask to run another command in another zone (\fBwardcell zone enter\fR), which the
configuration allows or refuses, optionally after a person approves. Every run keeps a
hash\-chained audit log.
.PP
Each command has a page of its own, named in SUBCOMMANDS below.
",
        exit: EXIT_RELAYED,
        environment: r"
.TP
\fBWARDCELL_SANDBOX\fR, \fBWARDCELL_ZONE\fR, \fBWARDCELL_ZONE_SOCKET\fR
Set inside every sandbox (the last two in a zone); they choose which commands are
offered. They are a convenience, not a boundary.
.TP
\fBXDG_CONFIG_HOME\fR, \fBXDG_STATE_HOME\fR, \fBXDG_RUNTIME_DIR\fR, \fBHOME\fR
Where the configuration, the audit logs and the runs' sockets are.
.TP
\fBWARDCELL_LOG\fR
\fBoff\fR, \fBerror\fR, \fBwarn\fR, \fBinfo\fR, \fBdebug\fR or \fBtrace\fR: print what
each wardcell process does at that level to standard error.
",
        examples: r"Check the configuration, then run an agent in the default zone:
.PP
.EX
wardcell policy check && wardcell run \-\- claude
.EE
.PP
Run a build in the zone \fBbuild\fR, and read what happened:
.PP
.EX
wardcell run \-\-zone build \-\- make
wardcell logs show latest
.EE
",
        see_also: &[
            "wardcell-run",
            "wardcell-zone",
            "wardcell-policy",
            "wardcell-logs",
        ],
    },
    Prose {
        page: "wardcell-run",
        description: r"Start a new sandbox and run \fICOMMAND\fR in it, with the permissions of the
default zone, of \fB\-\-zone\fR \fIZONE\fR, or of \fB\-\-profile\fR \fIPROFILE\fR outside
any zone (where no \fBzone\fR command works). The command's standard input, output and
error are passed through (a terminal is given a pty of the sandbox's own), its exit
status comes back, and signals sent to \fBwardcell\fR reach it. Every process the command
starts ends with the run. \fB\-\-read\fR, \fB\-\-write\fR, \fB\-\-deny\fR and
\fB\-\-allow\fR add to the profile the run starts in, for this run only; the audit log
records them. With \fB\-\-profile\fR, the credentials the profile names are attached by
its proxy (as a zone's are with \fBauthenticated = true\fR): the built\-in
\fBclaude\-code\fR and \fBcodex\fR carry their API key so, from \fBANTHROPIC_API_KEY\fR or
\fBOPENAI_API_KEY\fR, and a run whose key is not set is refused before it starts.
Host only: a sandbox cannot start another sandbox.
",
        exit: EXIT_RELAYED,
        environment: r"
.TP
\fBXDG_CONFIG_HOME\fR, \fBHOME\fR
Where the user's \fIzones.toml\fR is, unless \fB\-\-config\fR names a file.
.TP
\fBXDG_RUNTIME_DIR\fR
Where the run's sockets are made (a private directory under \fI/tmp\fR without it).
.TP
\fBWARDCELL_LOG\fR
\fBoff\fR, \fBerror\fR, \fBwarn\fR, \fBinfo\fR, \fBdebug\fR or \fBtrace\fR: print what
each wardcell process does to standard error, each line with the run id (as
\fB\-\-verbose\fR does for \fBdebug\fR). The command's environment does not change.
.PP
The command's environment is the caller's, less what the profile's \fBenv.deny\fR
removes, plus its \fBenv.set\fR and the proxy and CA variables of a sandbox with network.
",
        examples: r"Run a shell in the default zone:
.PP
.EX
wardcell run \-\- bash
.EE
.PP
Run Claude Code with only its key, which never enters the sandbox:
.PP
.EX
ANTHROPIC_API_KEY=sk\-ant\-... wardcell run \-\-profile claude\-code \-\- claude
.EE
.PP
Run tests under a built\-in profile, reading one more tree and reaching one more host:
.PP
.EX
wardcell run \-\-profile developer\-readonly \-\-read /opt/sdk \e
    \-\-allow registry.npmjs.org:443 \-\- npm test
.EE
",
        see_also: &[
            "wardcell-zone-enter",
            "wardcell-policy-show",
            "wardcell-logs-show",
        ],
    },
    Prose {
        page: "wardcell-policy",
        description: r"Read the configuration on the host, without running anything: \fBcheck\fR
validates it, \fBshow\fR prints what a zone or profile resolves to on this machine
(exactly what the broker enforces), \fBwhy\fR explains one decision.
",
        exit: EXIT_HOST,
        environment: ENV_CONFIG,
        examples: r".EX
wardcell policy check
wardcell policy show agent
wardcell policy why \-\-zone agent ~/.ssh/id_ed25519
.EE
",
        see_also: &[
            "wardcell-policy-check",
            "wardcell-policy-show",
            "wardcell-policy-why",
        ],
    },
    Prose {
        page: "wardcell-policy-check",
        description: r"Load the configuration, check every key, resolve every zone and every profile on
this machine, and check the credentials' sources, without running anything. Prints
\fBok:\fR and a summary, and warnings on standard error (a \fBwrite\fR path that does
not exist, a credential a zone would never attach, a Unix socket left out). An error is one line:
the file, the line, the column, the key and what is wrong. A zone that requires
approval without an approval plugin is an error.
",
        exit: r"0 when the configuration is valid (warnings do not change it); 1 when it is not,
or on a wardcell error; 2 for a usage error.
",
        environment: ENV_CONFIG,
        examples: r".EX
wardcell policy check
wardcell policy check \-\-config ./zones.toml \-\-output json
.EE
",
        see_also: &["wardcell-policy-show"],
    },
    Prose {
        page: "wardcell-policy-show",
        description: r"Print what each zone (or one \fIZONE\fR, or \fB\-\-profile\fR \fIPROFILE\fR)
resolves to on this machine: the paths readable, writable and masked, as they exist
now, the hosts allowed, the environment removed and set, the credentials attached, the
zones it may be entered from. \fB\-\-read\fR, \fB\-\-write\fR, \fB\-\-deny\fR and
\fB\-\-allow\fR show what those \fBrun\fR options would add.
",
        exit: EXIT_HOST,
        environment: ENV_CONFIG,
        examples: r".EX
wardcell policy show
wardcell policy show push \-\-output json
wardcell policy show \-\-profile codex
.EE
",
        see_also: &["wardcell-policy-check", "wardcell-run"],
    },
    Prose {
        page: "wardcell-policy-why",
        description: r"Say whether a zone (the default one unless \fB\-\-zone\fR) or a profile may read
(or, with \fB\-\-write\fR, write) a path, or reach \fIHOST\fR:\fIPORT\fR; which rule of
the configuration decides; and which zones would allow it. The first word printed is
\fBallowed\fR or \fBdenied\fR.
",
        exit: r"0 when allowed; 1 when denied, or for a refusal or a wardcell error; 2 for a usage
error.
",
        environment: ENV_CONFIG,
        examples: r".EX
wardcell policy why ./src
wardcell policy why \-\-write .git/hooks/pre\-commit
wardcell policy why \-\-zone push github.com:443
.EE
",
        see_also: &["wardcell-zone-why", "wardcell-policy-show"],
    },
    Prose {
        page: "wardcell-zone",
        description: r"The zones of the configuration. On the host, \fBzone list\fR lists them. Inside a
sandbox started in a zone, \fBzone list\fR lists the zones it may enter,
\fBzone current\fR names its own, \fBzone why\fR explains a decision, \fBzone denials\fR
lists the connections its proxy refused, and \fBzone enter\fR runs a command in another
zone, in a new sandbox.
",
        exit: EXIT_HOST,
        environment: ENV_ZONE,
        examples: r".EX
wardcell zone list
wardcell zone enter push \-\- git push
.EE
",
        see_also: &["wardcell-zone-list", "wardcell-zone-enter"],
    },
    Prose {
        page: "wardcell-zone-list",
        description: r"On the host: every zone of the configuration, sorted by name, with whether it is the
default, its profile, the zones it may be entered from, and its description. Inside a sandbox started in a zone:
the zones it may enter, as its supervisor answers, from the configuration the run
started with (\fB\-\-config\fR does not apply there).
",
        exit: EXIT_HOST,
        environment: r"
.TP
\fBXDG_CONFIG_HOME\fR, \fBHOME\fR
On the host: where the user's \fIzones.toml\fR is.
.TP
\fBWARDCELL_SANDBOX\fR, \fBWARDCELL_ZONE\fR, \fBWARDCELL_ZONE_SOCKET\fR
Set in a zone's sandbox: the list comes from the supervisor at the socket.
",
        examples: r".EX
wardcell zone list
wardcell zone list \-\-output json
.EE
",
        see_also: &["wardcell-zone-enter"],
    },
    Prose {
        page: "wardcell-zone-current",
        description: r"Print the name of the zone this sandbox is in, alone on a line, so that
\fB$(wardcell zone current)\fR needs no parsing. Inside a zone only.
",
        exit: EXIT_HOST,
        environment: ENV_ZONE,
        examples: r".EX
echo \(dqin zone $(wardcell zone current)\(dq
.EE
",
        see_also: &["wardcell-zone-list"],
    },
    Prose {
        page: "wardcell-zone-why",
        description: r"Inside a zone: say whether this zone may read (or, with \fB\-\-write\fR, write) a
path or reach \fIHOST\fR:\fIPORT\fR, which rule decides, and which zones this run may
enter would allow it. The first word printed is \fBallowed\fR or \fBdenied\fR. The
supervisor answers from the run's own configuration.
",
        exit: r"0 when allowed; 1 when denied, or for a refusal or a wardcell error; 2 for a usage
error.
",
        environment: ENV_ZONE,
        examples: r".EX
wardcell zone why ~/.aws/credentials
wardcell zone why registry.npmjs.org:443
.EE
",
        see_also: &["wardcell-policy-why", "wardcell-zone-enter"],
    },
    Prose {
        page: "wardcell-zone-denials",
        description: r"Inside a zone: the connections this sandbox's proxy refused lately (the last 64),
each with the host, the port and why; the audit log has them all.
",
        exit: EXIT_HOST,
        environment: ENV_ZONE,
        examples: r".EX
wardcell zone denials
.EE
",
        see_also: &["wardcell-zone-why", "wardcell-logs-show"],
    },
    Prose {
        page: "wardcell-zone-enter",
        description: r"Inside a zone: ask the broker to run \fICOMMAND\fR in \fIZONE\fR, in a new sandbox
with that zone's permissions. The broker checks that the zone lists every zone of the
caller's chain in \fBenter_from\fR, and asks the approval plugin when the zone
\fBrequires_approval\fR. Standard input, output and error go with the request (a
terminal is given a pty of the new sandbox's own); only the exit status comes back.
Nothing is widened in place: the calling sandbox keeps its own permissions.
",
        exit: EXIT_RELAYED,
        environment: ENV_ZONE,
        examples: r"Push from an agent's zone through a zone that holds the git credential:
.PP
.EX
wardcell zone enter push \-\- git push origin main
.EE
",
        see_also: &["wardcell-zone-list", "wardcell-approvals"],
    },
    Prose {
        page: "wardcell-logs",
        description: r"Every run writes one audit log, JSON Lines, hash\-chained, outside every sandbox:
\fBlogs list\fR lists the runs, \fBlogs show\fR prints one run's events,
\fBlogs verify\fR checks its chain. A run is named by its id, \fBlatest\fR, or the
unique start of its id.
",
        exit: EXIT_HOST,
        environment: ENV_STATE,
        examples: r".EX
wardcell logs list \-\-limit 5
wardcell logs show latest \-\-category proxy
wardcell logs verify 20261202T0932
.EE
",
        see_also: &[
            "wardcell-logs-list",
            "wardcell-logs-show",
            "wardcell-logs-verify",
        ],
    },
    Prose {
        page: "wardcell-logs-list",
        description: r"The runs that have a log, newest first: the run id, the start (UTC), the zone, the
exit status (\fBrunning\fR while it runs, \fBkilled\fR when its broker is gone without
finishing the log), the duration and the command. \fBwardcell doctor\fR's trial runs
only with \fB\-\-all\fR, marked.
",
        exit: EXIT_HOST,
        environment: ENV_STATE,
        examples: r".EX
wardcell logs list
wardcell logs list \-\-limit 1 \-\-output json
.EE
",
        see_also: &["wardcell-logs-show"],
    },
    Prose {
        page: "wardcell-logs-show",
        description: r"Print one run's events, one a line in words (or the log's own JSON lines, or one
JSON document), checking the hash chain on the way. \fIID\fR is a run id
(\fBwardcell logs list\fR shows them), \fBlatest\fR (the first run \fBlogs list\fR
shows), or the start of exactly one run id; a start that several ids share is refused
with one line listing them. A log damaged partway shows the events before the damage,
then says where it is.
",
        exit: r"0 when the log was read whole; 1 when it is damaged (after the events before the
damage), when \fIID\fR names no run or more than one, or on a wardcell error; 2 for a
usage error (an unknown \fB\-\-category\fR).
",
        environment: ENV_STATE,
        examples: r".EX
wardcell logs show latest
wardcell logs show 20261202T093212Z \-\-category proxy
wardcell logs show latest \-\-output jsonl | jq .event
.EE
",
        see_also: &["wardcell-logs-list", "wardcell-logs-verify"],
    },
    Prose {
        page: "wardcell-logs-verify",
        description: r"Check that no event of a run's log was edited, removed or reordered, and that the
log ends with \fBrun.finished\fR (or that the run is still going). \fIID\fR is a run id,
\fBlatest\fR or the start of exactly one id, as for \fBlogs show\fR. Prints \fBok:\fR,
the number of events and the last event's hash, which a copy kept elsewhere (syslog,
with \fB[audit] syslog\fR) can be compared with.
",
        exit: r"0 when the chain is intact; 1 when it is not, when the log stops without
\fBrun.finished\fR and the run is over, when \fIID\fR names no run or more than one, or
on a wardcell error; 2 for a usage error.
",
        environment: ENV_STATE,
        examples: r".EX
wardcell logs verify latest
wardcell logs verify 20261202T093212Z\-3f9a1c2b \-\-output json
.EE
",
        see_also: &["wardcell-logs-show"],
    },
    Prose {
        page: "wardcell-approvals",
        description: r"Answer the zone entries waiting for a person's approval. The approval plugin
shipped with wardcell, \fBwardcell\-approve\fR (\fB[approval] plugin\fR in
\fIzones.toml\fR), queues each request of a zone with \fBrequires_approval = true\fR;
these commands list, show, approve and deny them, on the host only, where nothing
sandboxed can answer.
",
        exit: EXIT_HOST,
        environment: ENV_STATE,
        examples: r".EX
wardcell approvals watch
wardcell approvals approve 3f9a1c2b \-\-reason \(dqreviewed the diff\(dq
.EE
",
        see_also: &["wardcell-approvals-watch", "wardcell-zone-enter"],
    },
    Prose {
        page: "wardcell-approvals-list",
        description: r"The requests waiting for an answer, newest first: id, age, run, calling zone and its
chain, zone asked for, command, directory, and the time left before the request is
refused.
",
        exit: EXIT_HOST,
        environment: ENV_STATE,
        examples: r".EX
wardcell approvals list
.EE
",
        see_also: &["wardcell-approvals-show"],
    },
    Prose {
        page: "wardcell-approvals-show",
        description: r"One request whole: the command, its directory, the zone asked for and the calling
zone, and what entering the zone would add over the calling zone (paths, hosts,
credentials).
",
        exit: EXIT_HOST,
        environment: ENV_STATE,
        examples: r".EX
wardcell approvals show 3f9a1c2b
.EE
",
        see_also: &["wardcell-approvals-approve", "wardcell-approvals-deny"],
    },
    Prose {
        page: "wardcell-approvals-approve",
        description: r"Approve a request: the command starts in the zone it asked for. The reason (by
default \(lqapproved\(rq) and who answered are recorded in the run's audit log.
",
        exit: EXIT_HOST,
        environment: ENV_STATE,
        examples: r".EX
wardcell approvals approve 3f9a1c2b \-\-reason \(dqexpected push\(dq
.EE
",
        see_also: &["wardcell-approvals-deny"],
    },
    Prose {
        page: "wardcell-approvals-deny",
        description: r"Deny a request, saying why: the caller's \fBzone enter\fR is refused with the reason,
which the audit log records too.
",
        exit: EXIT_HOST,
        environment: ENV_STATE,
        examples: r".EX
wardcell approvals deny 3f9a1c2b \-\-reason \(dqnot during the freeze\(dq
.EE
",
        see_also: &["wardcell-approvals-approve"],
    },
    Prose {
        page: "wardcell-approvals-watch",
        description: r"Wait, and print each new request as it arrives, one line each: id, calling zone and
zone asked for, command, directory, run, time left, and the \fBapprovals show\fR
command that shows it whole. Until interrupted.
",
        exit: EXIT_HOST,
        environment: ENV_STATE,
        examples: r".EX
wardcell approvals watch
.EE
",
        see_also: &["wardcell-approvals-show"],
    },
    Prose {
        page: "wardcell-doctor",
        description: r"Check whether this machine can run wardcell's sandboxes: the helpers and their
versions, the kernel's release, Landlock's ABI, seccomp, user namespaces (and the
AppArmor profile where Ubuntu restricts them), the broker's peer check, the
configuration and the directories; then start a throwaway sandbox.
Each line says \fBOK\fR, \fBWARN\fR or \fBFAIL\fR, and what to do.
",
        exit: r"0 when nothing failed (warnings do not change it); 1 when a check failed; 2 for a
usage error.
",
        environment: ENV_CONFIG,
        examples: r".EX
wardcell doctor
wardcell doctor \-\-output json
.EE
",
        see_also: &["wardcell-policy-check"],
    },
    Prose {
        page: "wardcell-completions",
        description: r"Print the completion script for \fISHELL\fR. The script asks \fBwardcell\fR itself
for each completion, so it offers the commands and options that work where the shell
runs, the zone and profile names of your configuration (and the built\-in profiles),
the run ids of your audit logs (newest first, after \fBlatest\fR) and the values of
options such as \fB\-\-category\fR. A configuration that does not load gives no names,
and no error. The packages install the scripts for bash, zsh and fish.
",
        exit: r"0 on success; 1 when refused (in a sandbox started without zones); 2 for a usage
error (an unknown shell).
",
        environment: ENV_ZONE,
        examples: r"Without the packages, load it from a shell's start\-up file:
.PP
.EX
source <(wardcell completions bash)        # ~/.bashrc
wardcell completions zsh > ~/.zfunc/_wardcell  # a directory in $fpath
wardcell completions fish > ~/.config/fish/completions/wardcell.fish
.EE
",
        see_also: &[],
    },
];
