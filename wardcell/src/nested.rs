//! Sandbox tools started inside a sandbox. Their names are links to this binary in a
//! directory that goes first on every sandbox's `PATH` (`SANDBOX_TOOLS`): no
//! process there can make namespaces, so instead of the kernel's "Operation not permitted"
//! and the tool's guess at why, the caller (often an agent) reads that wardcell is
//! already the sandbox.

use std::process::ExitCode;

use wardcell_common::text::shown;

/// Sandbox tools that cannot work inside a sandbox, where no process can make namespaces.
/// Each name is a link to the client in the first of the directories
/// `wardcell_common::envrules::SANDBOX_TOOL_DIRS` names that exists, which goes first on
/// a sandbox's `PATH`: a tool looked up by name then gets one line saying wardcell is
/// already the sandbox, not the kernel's "Operation not permitted" and the tool's guess at
/// why (bwrap's sends one to change a sysctl).
pub const SANDBOX_TOOLS: [&str; 3] = ["bwrap", "firejail", "nsjail"];

/// The sandbox tool this process was started as, if any (the file name of argv[0]).
pub fn tool_called() -> Option<&'static str> {
    let argv0 = std::env::args_os().next()?;
    let name = std::path::Path::new(&argv0).file_name()?;
    SANDBOX_TOOLS.iter().copied().find(|t| name == *t)
}

/// One line, and status 1 (what the tools exit with when they cannot start).
pub fn refuse(tool: &str) -> ExitCode {
    // The zone is the sandbox's own variable: only a label in its own message.
    let zone = std::env::var("WARDCELL_ZONE")
        .map(|z| format!(" (zone '{}')", shown(&z)))
        .unwrap_or_default();
    wardcell_common::eprintln_line!(
        "error: {tool} cannot make a sandbox here: this command already runs in a wardcell sandbox{zone}, where no process can make namespaces; run it without a sandbox of its own, wardcell is the sandbox"
    );
    ExitCode::from(1)
}
