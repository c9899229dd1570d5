//! Running the machine's approval plugin for one zone entry (channel E, docs/PROTOCOL.md
//! section 7). Its request is built, and its answer parsed, in wardcell_common::approval.
//!
//! The plugin runs outside any sandbox, from `/`, with the helper environment
//! (wardcell_common::helper), in a process group of its own. Its answer is taken when the
//! plugin itself exits, whatever its children still hold open; then its whole group is
//! killed. It is also killed with its group when the caller goes away, when the zone's
//! `approval_timeout` passes, and when the run ends (the supervisor tracks its process like
//! an entered sandbox's).
//!
//! The plugin's process is run by wardcell_host::plugin; what the broker decides with its
//! answer is in supervisor.rs (`Supervisor::admit`).

use serde_json::Value;

pub use wardcell_common::approval::{request, Answer, Entry};
pub use wardcell_host::plugin::Plugin;

use crate::sys;

/// Start `plugin` with `request` on its stdin (wardcell_host::plugin::Plugin::start), as
/// a helper of this thread, watched by its `sys::Process`.
pub fn start(
    plugin: Option<&[String]>,
    request: &Value,
    host_env: &[(String, String)],
) -> Result<Plugin<sys::Process>, Answer> {
    Plugin::start(plugin, request, host_env, sys::spawn_helper)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;
    use std::time::{Duration, Instant};

    fn sh(script: &str) -> Vec<String> {
        vec!["/bin/sh".into(), "-c".into(), script.into()]
    }

    fn ask(plugin: Option<&[String]>, timeout: Option<Duration>) -> Answer {
        let (caller, _keep) = UnixStream::pair().unwrap();
        let req = serde_json::json!({"target": "push"});
        match start(plugin, &req, &[]) {
            Ok(p) => p.answer(timeout, caller.as_fd()),
            Err(refusal) => refusal,
        }
    }

    #[test]
    fn a_real_plugin_process() {
        let a = ask(
            Some(&sh(
                r#"read l; echo '{"approved": true, "approver": "me"}'"#,
            )),
            None,
        );
        assert!(a.approved, "{a:?}");
        let a = ask(Some(&sh("exit 3")), None);
        assert!(!a.approved && a.reason.contains("failed"), "{a:?}");
        let a = ask(Some(&sh("sleep 5")), Some(Duration::from_millis(200)));
        assert!(
            !a.approved && a.reason.contains("approval_timeout"),
            "{a:?}"
        );
        let a = ask(None, None);
        assert!(a.reason.contains("no approval plugin"), "{a:?}");
        let a = ask(Some(&["/nonexistent/plugin".to_string()]), None);
        assert!(a.reason.contains("could not be started"), "{a:?}");
        let a = ask(Some(&sh("head -c 70000 /dev/zero")), None);
        assert!(a.reason.contains("longer than 64 KiB"), "{a:?}");
    }

    #[test]
    fn the_answer_counts_when_the_plugin_exits_whatever_its_children_hold() {
        let start = Instant::now();
        let a = ask(
            Some(&sh(r#"sleep 100 & echo '{"approved": true}'"#)),
            Some(Duration::from_secs(20)),
        );
        assert!(a.approved, "{a:?}");
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
    }

    #[test]
    fn a_caller_that_goes_away_ends_the_wait() {
        let (caller, gone) = UnixStream::pair().unwrap();
        let req = serde_json::json!({});
        let p = start(Some(&sh("sleep 100")), &req, &[]).unwrap();
        let t = std::thread::spawn(move || {
            // Meant to come while `answer` waits; before it would be seen as well.
            std::thread::sleep(Duration::from_millis(100));
            drop(gone);
        });
        let a = p.answer(None, caller.as_fd());
        t.join().unwrap();
        assert!(a.reason.contains("caller went away"), "{a:?}");
    }
}
