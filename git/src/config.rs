//! Git's configuration files read as git reads them (`config.c`, `git_parse_source`), so
//! that what decides whether a sandbox left git something to run on the host sees the
//! keys git will see: several sections on a line (`[user][core] fsmonitor = x`), a lone
//! carriage return as white space, `\`-continued values, quoted subsections with escapes,
//! comments inside values, a byte-order mark. Checked against the real `git config
//! --list` on generated inputs (`git/tests/config.rs`). Bounded: bytes in, entries
//! out, no recursion, nothing read from disk.

/// One `key = value` as git lists it: `section.name` or `section.subsection.name`, the
/// section and the name lower case, a quoted subsection as written; `None` for a key
/// without `=` (a boolean true).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub key: String,
    pub value: Option<Vec<u8>>,
}

/// Where git stops reading a file: about the line it reports as bad (1-based; git counts
/// a line more or less on some errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bad(pub usize);

/// The largest file parsed: one larger is reported as such, never read.
pub const MAX_FILE: usize = 1 << 20;

/// The most a file's entries may hold, keys and values together: a megabyte can repeat a
/// long subsection on every short line (hundreds of megabytes of keys); past this the
/// file is one that could not be checked.
pub const MAX_ENTRIES: usize = 8 << 20;

/// What parsing one file gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// [`parse`]'s entries.
    Entries(Vec<Entry>),
    /// [`parse`]'s [`Bad`]: where git stops reading it.
    Bad(usize),
    /// Larger than [`MAX_FILE`], or its entries more than [`MAX_ENTRIES`].
    TooLarge,
}

impl Parsed {
    /// What [`parse`] makes of `bytes`, within [`MAX_FILE`] and [`MAX_ENTRIES`].
    pub fn of(bytes: &[u8]) -> Parsed {
        if bytes.len() > MAX_FILE {
            return Parsed::TooLarge;
        }
        match entries(bytes, MAX_ENTRIES) {
            Ok(e) => Parsed::Entries(e),
            Err(Stop::Bad(line)) => Parsed::Bad(line),
            Err(Stop::TooLarge) => Parsed::TooLarge,
        }
    }
}

/// Why [`entries`] stopped.
enum Stop {
    Bad(usize),
    TooLarge,
}

struct Source<'a> {
    bytes: &'a [u8],
    at: usize,
    eof: bool,
    line: usize,
}

impl Source<'_> {
    /// git's `get_next_char`: `\r\n` is `\n`, a lone `\r` is itself; the end is a `\n`.
    fn next(&mut self) -> u8 {
        let mut c = match self.bytes.get(self.at) {
            Some(&c) => c,
            None => {
                self.eof = true;
                self.line += 1;
                return b'\n';
            }
        };
        self.at += 1;
        if c == b'\r' && self.bytes.get(self.at) == Some(&b'\n') {
            self.at += 1;
            c = b'\n';
        }
        if c == b'\n' {
            self.line += 1;
        }
        c
    }
}

/// git's `isspace` (its own table: space, tab, newline, carriage return; not `\v`, `\f`).
fn space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r')
}

/// git's `iskeychar`.
fn keychar(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'-'
}

/// Every entry of a configuration file's bytes, in order, or where git stops reading it
/// (git refuses the whole file then: no entry of it is used).
pub fn parse(bytes: &[u8]) -> Result<Vec<Entry>, Bad> {
    entries(bytes, usize::MAX).map_err(|stop| match stop {
        Stop::Bad(line) => Bad(line),
        Stop::TooLarge => Bad(0), // never: nothing is too large for usize::MAX
    })
}

/// [`parse`], stopping once the entries hold more than `most` bytes.
fn entries(bytes: &[u8], most: usize) -> Result<Vec<Entry>, Stop> {
    let bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    let mut s = Source {
        bytes,
        at: 0,
        eof: false,
        line: 1,
    };
    // A partial byte-order mark: git stops at once.
    if bytes.first() == Some(&0xef) {
        return Err(Stop::Bad(1));
    }
    // A NUL byte: git reads on, but hands each key on as a C string, cut at the NUL
    // (`[remote "origin.uploadpack\0"] url = ...` is `remote.origin.uploadpack` to it).
    // Such a file is never one a person wrote: refused, so that it is reported.
    if let Some(at) = bytes.iter().position(|&b| b == 0) {
        return Err(Stop::Bad(
            1 + bytes[..at].iter().filter(|&&b| b == b'\n').count(),
        ));
    }
    let (mut out, mut base, mut comment) = (Vec::new(), String::new(), false);
    let mut held = 0usize;
    loop {
        let c = s.next();
        if c == b'\n' {
            if s.eof {
                return Ok(out);
            }
            comment = false;
            continue;
        }
        if comment || space(c) {
            continue;
        }
        if c == b'#' || c == b';' {
            comment = true;
            continue;
        }
        if c == b'[' {
            base = section(&mut s)
                .filter(|b| !b.is_empty())
                .ok_or(Stop::Bad(s.line))?;
            base.push('.');
            continue;
        }
        if !c.is_ascii_alphabetic() {
            return Err(Stop::Bad(s.line));
        }
        let mut key = base.clone();
        key.push(c.to_ascii_lowercase() as char);
        let e = entry(&mut s, key).ok_or(Stop::Bad(s.line))?;
        held += e.key.len() + e.value.as_ref().map_or(0, Vec::len);
        if held > most {
            return Err(Stop::TooLarge);
        }
        out.push(e);
    }
}

/// git's `get_base_var` and `get_extended_base_var`: after `[`, to `]`.
fn section(s: &mut Source<'_>) -> Option<String> {
    let mut name = String::new();
    loop {
        let c = s.next();
        if s.eof {
            return None;
        }
        if c == b']' {
            return Some(name);
        }
        if space(c) {
            return extended(s, name, c);
        }
        if !keychar(c) && c != b'.' {
            return None;
        }
        name.push(c.to_ascii_lowercase() as char);
    }
}

/// `[section "subsection"]`: the subsection as written, `\` taking the next byte.
fn extended(s: &mut Source<'_>, mut name: String, mut c: u8) -> Option<String> {
    loop {
        if c == b'\n' {
            return None;
        }
        c = s.next();
        if !space(c) {
            break;
        }
    }
    if c != b'"' {
        return None;
    }
    name.push('.');
    let mut sub = Vec::new();
    loop {
        let mut c = s.next();
        if c == b'\n' {
            return None;
        }
        if c == b'"' {
            break;
        }
        if c == b'\\' {
            c = s.next();
            if c == b'\n' {
                return None;
            }
        }
        sub.push(c);
    }
    name.push_str(&String::from_utf8_lossy(&sub));
    (s.next() == b']').then_some(name)
}

/// git's `get_value`: the rest of the name, then `= value` or nothing.
fn entry(s: &mut Source<'_>, mut key: String) -> Option<Entry> {
    let mut c;
    loop {
        c = s.next();
        if s.eof || !keychar(c) {
            break;
        }
        key.push(c.to_ascii_lowercase() as char);
    }
    while c == b' ' || c == b'\t' {
        c = s.next();
    }
    let value = match c {
        b'\n' => None,
        b'=' => Some(value(s)?),
        _ => return None,
    };
    Some(Entry { key, value })
}

/// git's `parse_value`: quotes, escapes, comments and the trailing white space.
fn value(s: &mut Source<'_>) -> Option<Vec<u8>> {
    let (mut quote, mut comment, mut trim) = (false, false, 0usize);
    let mut v = Vec::new();
    loop {
        let mut c = s.next();
        if c == b'\n' {
            if quote {
                return None;
            }
            if trim > 0 {
                v.truncate(trim);
            }
            return Some(v);
        }
        if comment {
            continue;
        }
        if space(c) && !quote {
            if trim == 0 {
                trim = v.len();
            }
            if !v.is_empty() {
                v.push(c);
            }
            continue;
        }
        if !quote && (c == b';' || c == b'#') {
            comment = true;
            continue;
        }
        trim = 0;
        if c == b'\\' {
            c = match s.next() {
                b'\n' => continue,
                b't' => b'\t',
                b'b' => 0x08,
                b'n' => b'\n',
                c @ (b'\\' | b'"') => c,
                _ => return None,
            };
            v.push(c);
            continue;
        }
        if c == b'"' {
            quote = !quote;
            continue;
        }
        v.push(c);
    }
}

/// Keys known to make git run nothing and read nothing else: the only ones a new or
/// changed configuration may hold without being reported (`guard`). `*` stands for a
/// subsection; section and name compare in any case. Anything else, named or not here
/// (`core.fsmonitor`, `interactive.diffFilter`, `mergetool.*.path`, `sendemail.*Cmd`,
/// `imap.tunnel`, `guitool.*.cmd`, `instaweb.httpd`, `include.path`, a key added to git
/// next year), is reported by its name.
pub const HARMLESS: &[&str] = &[
    "core.repositoryformatversion",
    "core.filemode",
    "core.bare",
    "core.logallrefupdates",
    "core.ignorecase",
    "core.precomposeunicode",
    "core.symlinks",
    "core.autocrlf",
    "core.eol",
    "core.safecrlf",
    "core.quotepath",
    "core.abbrev",
    "core.compression",
    "core.loosecompression",
    "core.whitespace",
    "core.commentchar",
    "core.commentstring",
    "core.sparsecheckout",
    "core.sparsecheckoutcone",
    "core.splitindex",
    "core.untrackedcache",
    "core.checkstat",
    "core.trustctime",
    "core.preloadindex",
    "core.multipackindex",
    "core.commitgraph",
    "core.deltabasecachelimit",
    "core.bigfilethreshold",
    "core.packedgitlimit",
    "core.packedgitwindowsize",
    "core.warnambiguousrefs",
    "user.name",
    "user.email",
    "user.useconfigonly",
    "author.name",
    "author.email",
    "committer.name",
    "committer.email",
    "remote.*.url",
    "remote.*.pushurl",
    "remote.*.fetch",
    "remote.*.push",
    "remote.*.tagopt",
    "remote.*.prune",
    "remote.*.prunetags",
    "remote.*.mirror",
    "remote.*.skipdefaultupdate",
    "remote.*.skipfetchall",
    "remote.*.promisor",
    "remote.*.partialclonefilter",
    "branch.*.remote",
    "branch.*.merge",
    "branch.*.rebase",
    "branch.*.pushremote",
    "branch.*.description",
    "branch.autosetupmerge",
    "branch.autosetuprebase",
    "branch.sort",
    "init.defaultbranch",
    "pull.rebase",
    "pull.ff",
    "push.default",
    "push.autosetupremote",
    "push.followtags",
    "fetch.prune",
    "fetch.prunetags",
    "fetch.parallel",
    "fetch.writecommitgraph",
    "merge.ff",
    "merge.conflictstyle",
    "merge.log",
    "merge.renamelimit",
    "rebase.autosquash",
    "rebase.autostash",
    "rebase.updaterefs",
    "rerere.enabled",
    "rerere.autoupdate",
    "color.ui",
    "color.*",
    "color.*.*",
    "column.ui",
    "advice.*",
    "status.showuntrackedfiles",
    "status.short",
    "status.branch",
    "status.submodulesummary",
    "log.date",
    "log.decorate",
    "log.showsignature",
    "diff.renames",
    "diff.algorithm",
    "diff.colormoved",
    "diff.mnemonicprefix",
    "diff.noprefix",
    "diff.submodule",
    "commit.verbose",
    "commit.cleanup",
    "tag.sort",
    "gc.auto",
    "gc.autodetach",
    "gc.autopacklimit",
    "gc.pruneexpire",
    "gc.reflogexpire",
    "gc.reflogexpireunreachable",
    "gc.writecommitgraph",
    "index.version",
    "index.threads",
    "index.skiphash",
    "pack.threads",
    "pack.windowmemory",
    "transfer.fsckobjects",
    "fetch.fsckobjects",
    "receive.fsckobjects",
    "submodule.*.url",
    "submodule.*.active",
    "submodule.*.branch",
    "submodule.active",
    "submodule.recurse",
    "worktree.guessremote",
    "lfs.repositoryformatversion",
    "lfs.*.access",
    "maintenance.auto",
    "maintenance.strategy",
    "feature.manyfiles",
    "feature.experimental",
    "http.postbuffer",
    "http.version",
    "protocol.version",
];

/// The URL schemes git serves itself (or with the remote helpers it ships): any other
/// `X://address` runs `git-remote-X`, found on `PATH`.
const OWN_SCHEMES: &[&[u8]] = &[
    b"http", b"https", b"ftp", b"ftps", b"ssh", b"git", b"file", b"git+ssh", b"ssh+git",
];

/// Whether an entry is harmless: its key one of [`HARMLESS`], and a URL not one that
/// names a remote helper git runs by name (`X::address` and, for a scheme git does not
/// serve itself, `X://address` run `git-remote-X`, found on `PATH`; `ext::` runs a
/// command).
pub fn harmless_entry(key: &str, value: Option<&[u8]>) -> bool {
    let url = key.ends_with(".url") || key.ends_with(".pushurl");
    let v = value.unwrap_or_default();
    let helper = v.windows(2).any(|w| w == b"::");
    let scheme = v.windows(3).position(|w| w == b"://").map(|i| &v[..i]);
    let foreign = scheme.is_some_and(|s| !OWN_SCHEMES.iter().any(|o| s.eq_ignore_ascii_case(o)));
    harmless(key) && !(url && (helper || foreign))
}

/// Whether `key` (as [`parse`] gives it) is one of [`HARMLESS`].
pub fn harmless(key: &str) -> bool {
    let parts: Vec<&str> = key.splitn(2, '.').collect();
    let (Some(section), Some(rest)) = (parts.first(), parts.get(1)) else {
        return false;
    };
    // `section.name` or `section.subsection.name` (the subsection may hold dots).
    let (sub, name) = match rest.rsplit_once('.') {
        Some((sub, name)) => (Some(sub), name),
        None => (None, *rest),
    };
    HARMLESS.iter().any(|h| {
        let h: Vec<&str> = h.split('.').collect();
        match (h.as_slice(), sub) {
            ([s, n], None) => s.eq_ignore_ascii_case(section) && n.eq_ignore_ascii_case(name),
            ([s, "*", n], Some(_)) => {
                s.eq_ignore_ascii_case(section) && (*n == "*" || n.eq_ignore_ascii_case(name))
            }
            _ => false,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(text: &str) -> Vec<String> {
        parse(text.as_bytes())
            .unwrap()
            .into_iter()
            .map(|e| e.key)
            .collect()
    }

    #[test]
    fn read_as_git_reads_it() {
        assert_eq!(keys("[user][core] fsmonitor = x\n"), ["core.fsmonitor"]);
        assert_eq!(keys("[user]\r[core] fsmonitor = x\n"), ["core.fsmonitor"]);
        assert_eq!(keys("[a]\n\tx = 1 \\\n[core] fsmonitor = y\n"), ["a.x"]);
        assert_eq!(
            keys("[Remote \"Origin\"]\n\tURL = u\n"),
            ["remote.Origin.url"]
        );
        assert_eq!(keys("[Remote.Origin]\n\tURL = u\n"), ["remote.origin.url"]);
        assert_eq!(keys("\u{feff}[a]\nb\n"), ["a.b"]);
        let e = parse(b"[a]\nb = \"x ; y\" # c\n").unwrap();
        assert_eq!(e[0].value.as_deref(), Some(&b"x ; y"[..]));
        assert!(parse(b"[a]\nb = \"open\n").is_err());
        assert!(parse(b"[a]\nb = \\q\n").is_err());
        assert!(parse(b"[a\n").is_err());
        assert!(parse(b"[a]\n1b = x\n").is_err());
    }

    #[test]
    fn harmless_keys_are_named_and_nothing_else() {
        for k in [
            "user.name",
            "core.bare",
            "remote.origin.url",
            "branch.main.merge",
            "color.diff.meta",
            "remote.a.b.url",
        ] {
            assert!(harmless(k), "{k}");
        }
        for k in [
            "core.fsmonitor",
            "core.hookspath",
            "interactive.difffilter",
            "mergetool.x.path",
            "difftool.x.path",
            "sendemail.x.tocmd",
            "sendemail.tocmd",
            "imap.tunnel",
            "guitool.x.cmd",
            "instaweb.httpd",
            "include.path",
            "includeif.gitdir:/x.path",
            "remote.origin.uploadpack",
            "remote.origin.vcs",
            "filter.lfs.smudge",
            "alias.co",
            "core",
            "user.name.x.y",
        ] {
            assert!(!harmless(k), "{k}");
        }
        assert!(harmless_entry(
            "remote.origin.url",
            Some(b"https://example.com/r.git")
        ));
        // A key git would cut at a NUL: the file is refused, so reported.
        let cut = b"[core]\nbare = false\n[remote \"origin.uploadpack\0\"]\n\turl = x\n";
        assert_eq!(parse(cut).unwrap_err().0, 3);
        for own in [
            &b"HTTPS://h/r"[..],
            b"ssh://h/r",
            b"git@h:r.git",
            b"/srv/r.git",
        ] {
            assert!(harmless_entry("remote.origin.url", Some(own)));
        }
        for key in ["pull.twohead", "pull.octopus", "help.autocorrect"] {
            assert!(!harmless_entry(key, Some(b"x")), "{key}");
        }
        for helper in [
            &b"ext::sh -c evil"[..],
            b"evil::whatever",
            b"fd::3",
            b"evil://x",
            b"a.b://x",
        ] {
            assert!(!harmless_entry("remote.origin.url", Some(helper)));
            assert!(!harmless_entry("submodule.x.url", Some(helper)));
        }
    }
}
