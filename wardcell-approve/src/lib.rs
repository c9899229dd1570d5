//! The approval queue shared by the reference plugin (`wardcell-approve`) and the person's
//! side (`wardcell approvals`).
//!
//! One directory per user, `$XDG_STATE_HOME/wardcell/approvals` (inside wardcell's state
//! directory, which every sandbox has masked), mode 0700 and owned by the user: anything
//! else is refused, so no other user can read a request or answer one. In it, for request
//! `ID` (8 lower-case hex digits):
//!
//! - `ID.request` (0600): the plugin's record, written whole (a temporary file linked
//!   into place). The plugin holds an exclusive `flock` on it while it waits, so a request
//!   is *waiting* exactly while that lock is held: a plugin that was killed (its caller
//!   went away, its time ran out, its run ended) leaves a request nobody waits for.
//! - `ID.answer` (0600): the person's answer, created once (linked into place, never
//!   replaced). The plugin reads it as untrusted: a regular file of this user, at most
//!   [`MAX_ANSWER_FILE`] bytes, parsed by `wardcell_common::approval::parse_answer`.
#![forbid(unsafe_code)]

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use serde_json::Value;
use wardcell_common::approval::{parse_answer, Answer};

/// The most of a request record that is read (the plugin reads at most as much of its
/// stdin).
pub const MAX_REQUEST: u64 = 1024 * 1024;

/// The most of an answer file that is read; a larger one is refused.
pub const MAX_ANSWER_FILE: u64 = 4096;

/// The most requests a listing looks at.
pub const MAX_LISTED: usize = 1000;

/// The queue directory under wardcell's state directory.
pub fn dir(state: &Path) -> PathBuf {
    state.join("approvals")
}

/// Whether `id` is a request id: exactly 8 lower-case hex digits (never a path).
pub fn valid_id(id: &str) -> bool {
    id.len() == 8 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Seconds since the epoch.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn euid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// The queue directory, checked: a real directory (not a link), ours, and closed to
/// everyone else. With `create`, it (and the state directory) is made 0700 first.
pub fn open_dir(state: &Path, create: bool) -> Result<PathBuf, String> {
    let q = dir(state);
    if create {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&q)
            .map_err(|e| format!("cannot create the approval queue {}: {e}", q.display()))?;
    }
    let m = fs::symlink_metadata(&q).map_err(|e| {
        format!(
            "cannot open the approval queue {}: {e}; no request has been queued on this account",
            q.display()
        )
    })?;
    if !m.is_dir() || m.uid() != euid() || m.mode() & 0o077 != 0 {
        return Err(format!(
            "the approval queue {} is not a directory of yours closed to others (mode 0700); remove it and try again",
            q.display()
        ));
    }
    Ok(q)
}

/// Open `path` for reading without following a link and without blocking on a FIFO, and
/// check that it is a regular file of ours of at most `max` bytes, not writable by others.
fn open_checked(path: &Path, max: u64) -> io::Result<File> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(nofollow_nonblock())
        .open(path)?;
    let m = f.metadata()?;
    let bad = |what: &str| Err(io::Error::new(io::ErrorKind::InvalidData, what.to_string()));
    if !m.is_file() {
        return bad("not a regular file");
    }
    if m.uid() != euid() || m.mode() & 0o022 != 0 {
        return bad("not a file of yours closed to others");
    }
    if m.len() > max {
        return bad("too large");
    }
    Ok(f)
}

fn nofollow_nonblock() -> i32 {
    nix::fcntl::OFlag::O_NOFOLLOW.bits() | nix::fcntl::OFlag::O_NONBLOCK.bits()
}

/// Read at most `max` bytes of `f`; more is an error.
fn read_bounded(f: File, max: u64) -> io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    f.take(max + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > max {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "too large"));
    }
    Ok(buf)
}

/// A request the plugin is waiting on: dropping it releases the lock (and so the request
/// stops waiting) without removing the files; [`Queued::finish`] removes them.
pub struct Queued {
    pub id: String,
    dir: PathBuf,
    _lock: Flock<File>,
}

impl Queued {
    /// Remove the request and its answer.
    pub fn finish(self) {
        let _ = fs::remove_file(self.dir.join(format!("{}.answer", self.id)));
        let _ = fs::remove_file(self.dir.join(format!("{}.request", self.id)));
    }
}

/// A fresh request id from the kernel's random source.
fn new_id() -> io::Result<String> {
    let mut b = [0u8; 4];
    File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Queue `record` (its `id` is set here) under a new id: written to a temporary file,
/// locked, then linked into place, so that a reader sees it whole and already waiting.
pub fn enqueue(q: &Path, mut record: Value) -> Result<Queued, String> {
    let fail = |e: io::Error| format!("cannot queue the request in {}: {e}", q.display());
    for _ in 0..16 {
        let id = new_id().map_err(fail)?;
        record["id"] = Value::String(id.clone());
        match place(q, &id, &record) {
            Ok(lock) => {
                return Ok(Queued {
                    id,
                    dir: q.to_path_buf(),
                    _lock: lock,
                })
            }
            // Another request has this id: draw another.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(fail(e)),
        }
    }
    Err(fail(io::Error::other("no free request id")))
}

/// Write `record` as `ID.request`, locked before it is visible.
fn place(q: &Path, id: &str, record: &Value) -> io::Result<Flock<File>> {
    let tmp = q.join(format!(".{id}.{}.tmp", std::process::id()));
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    let placed = f
        .write_all(format!("{record}\n").as_bytes())
        .and_then(|()| f.sync_all())
        .and_then(|()| Flock::lock(f, FlockArg::LockExclusiveNonblock).map_err(|(_, e)| e.into()))
        // Linked, not renamed: never over a request another plugin placed meanwhile.
        .and_then(|lock| fs::hard_link(&tmp, q.join(format!("{id}.request"))).map(|()| lock));
    let _ = fs::remove_file(&tmp);
    placed
}

/// Whether the plugin that queued `id` still waits for it (holds its lock).
pub fn waiting(q: &Path, id: &str) -> bool {
    let Ok(f) = open_checked(&q.join(format!("{id}.request")), MAX_REQUEST) else {
        return false;
    };
    matches!(
        Flock::lock(f, FlockArg::LockSharedNonblock),
        Err((_, Errno::EWOULDBLOCK))
    )
}

/// One queued request as read back.
#[derive(Debug, Clone)]
pub struct Request {
    pub id: String,
    /// The plugin's record: `id`, `queued` (epoch seconds), `deadline` (epoch seconds or
    /// null) and `request` (what the broker sent).
    pub record: Value,
    pub waiting: bool,
}

impl Request {
    pub fn queued(&self) -> u64 {
        self.record["queued"].as_u64().unwrap_or(0)
    }
    pub fn deadline(&self) -> Option<u64> {
        self.record["deadline"].as_u64()
    }
    /// A field of the broker's request.
    pub fn field(&self, k: &str) -> &Value {
        &self.record["request"][k]
    }
}

/// Read request `id` (checked as untrusted: bounded, a regular file of ours).
pub fn read(q: &Path, id: &str) -> Result<Request, String> {
    if !valid_id(id) {
        return Err(format!(
            "{id:?} is not a request id (8 hex digits); `wardcell approvals list` shows them"
        ));
    }
    let path = q.join(format!("{id}.request"));
    let record = open_checked(&path, MAX_REQUEST)
        .and_then(|f| read_bounded(f, MAX_REQUEST))
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => format!(
                "there is no approval request {id}; `wardcell approvals list` shows those waiting"
            ),
            _ => format!("cannot read approval request {id}: {e}"),
        })?;
    let record: Value = serde_json::from_slice(&record)
        .ok()
        .filter(|v: &Value| v.is_object() && v["request"].is_object())
        .ok_or_else(|| {
            format!(
                "approval request {id} is not a valid record; remove {}",
                path.display()
            )
        })?;
    Ok(Request {
        id: id.to_string(),
        waiting: waiting(q, id),
        record,
    })
}

/// Every readable request (at most [`MAX_LISTED`]), newest first.
pub fn list(q: &Path) -> Result<Vec<Request>, String> {
    let entries = fs::read_dir(q)
        .map_err(|e| format!("cannot read the approval queue {}: {e}", q.display()))?;
    let mut out: Vec<Request> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            let id = name.to_str()?.strip_suffix(".request")?.to_string();
            valid_id(&id).then_some(id)
        })
        .take(MAX_LISTED)
        .filter_map(|id| read(q, &id).ok())
        .collect();
    out.sort_by(|a, b| b.queued().cmp(&a.queued()).then(a.id.cmp(&b.id)));
    Ok(out)
}

/// Record the person's answer to `id`: created once, never replaced. The reference is
/// the request id.
pub fn answer(
    q: &Path,
    id: &str,
    approved: bool,
    reason: &str,
    approver: &str,
) -> Result<(), String> {
    let body = serde_json::json!({
        "approved": approved,
        "reason": reason,
        "approver": approver,
        "reference": id,
    });
    let tmp = q.join(format!(".{id}.answer.{}.tmp", std::process::id()));
    let fail = |e: &dyn std::fmt::Display| format!("cannot record the answer to {id}: {e}");
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| fail(&e))?;
    let placed = f
        .write_all(body.to_string().as_bytes())
        .and_then(|()| f.sync_all())
        .and_then(|()| fs::hard_link(&tmp, q.join(format!("{id}.answer"))));
    let _ = fs::remove_file(&tmp);
    match placed {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(format!(
            "request {id} has been answered already; an answer is never replaced"
        )),
        Err(e) => Err(fail(&e)),
    }
}

/// The answer to `id`, if one is there: None while there is none; a refusal when what is
/// there is not a usable answer (the file is untrusted).
pub fn read_answer(q: &Path, id: &str) -> Option<Answer> {
    let path = q.join(format!("{id}.answer"));
    match open_checked(&path, MAX_ANSWER_FILE).and_then(|f| read_bounded(f, MAX_ANSWER_FILE)) {
        Ok(body) => Some(parse_answer(&body)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => Some(Answer::refusal(format!(
            "the answer to approval request {id} is unusable ({e})"
        ))),
    }
}

/// Remove requests nobody waits for any more that were queued more than `age` seconds
/// ago, with their answers (at most [`MAX_LISTED`] looked at).
pub fn sweep(q: &Path, age: u64) {
    let Ok(all) = list(q) else { return };
    for r in all
        .iter()
        .filter(|r| !r.waiting && r.queued() + age <= now())
    {
        let _ = fs::remove_file(q.join(format!("{}.answer", r.id)));
        let _ = fs::remove_file(q.join(format!("{}.request", r.id)));
    }
}

/// One line to syslog (authpriv, notice) as `tag` (see `wardcell_support::syslog`).
pub fn syslog(tag: &str, line: &str) {
    wardcell_support::syslog::send(tag, line);
}

/// A command line as one shown line, each word quoted as a shell would need it (see
/// `wardcell_support::text::shell_words`).
pub fn command_line(v: &Value) -> String {
    v.as_array()
        .map(|a| {
            let words: Vec<String> = a
                .iter()
                .map(|x| x.as_str().unwrap_or("?").to_string())
                .collect();
            wardcell_support::text::shell_words(&words)
        })
        .unwrap_or_default()
}

/// The file name of an id's request, for messages.
pub fn request_file(q: &Path, id: &str) -> PathBuf {
    q.join(format!("{id}.request"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("wardcell-approve-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_command_line_is_quoted_and_hides_nothing() {
        let v = serde_json::json!(["git", "push", "a b", "x\u{202e}y", "\u{3164}"]);
        assert_eq!(command_line(&v), "git push 'a b' $'x\\u202ey' $'\\u3164'");
    }

    #[test]
    fn ids() {
        assert!(valid_id("0a1b2c3d"));
        for bad in [
            "",
            "0a1b2c3",
            "0A1B2C3D",
            "../../x1",
            "0a1b2c3d0",
            "0a1b2c3/",
        ] {
            assert!(!valid_id(bad), "{bad}");
        }
    }

    #[test]
    fn a_request_waits_while_its_plugin_holds_it_and_is_answered_once() {
        let state = tmpdir("queue");
        let q = open_dir(&state, true).unwrap();
        let rec =
            serde_json::json!({"queued": now(), "deadline": null, "request": {"target": "push"}});
        let queued = enqueue(&q, rec).unwrap();
        let id = queued.id.clone();
        let r = read(&q, &id).unwrap();
        assert!(r.waiting);
        assert_eq!(r.field("target"), "push");
        assert_eq!(list(&q).unwrap().len(), 1);
        assert_eq!(read_answer(&q, &id), None);
        answer(&q, &id, false, "not now", "ana").unwrap();
        assert!(answer(&q, &id, true, "", "eve")
            .unwrap_err()
            .contains("answered already"));
        let a = read_answer(&q, &id).unwrap();
        assert!(!a.approved);
        assert_eq!(a.reason, "not now");
        assert_eq!(a.reference.as_deref(), Some(id.as_str()));
        // Its plugin gone, it waits no more, and a sweep removes it.
        drop(queued);
        assert!(!read(&q, &id).unwrap().waiting);
        sweep(&q, 3600);
        assert_eq!(list(&q).unwrap().len(), 1, "younger than an hour: kept");
        sweep(&q, 0);
        assert!(list(&q).unwrap().is_empty());
        assert!(
            fs::read_dir(&q).unwrap().next().is_none(),
            "its answer went too"
        );
        fs::remove_dir_all(&state).unwrap();
    }

    #[test]
    fn untrusted_answers_are_bounded_and_checked() {
        let state = tmpdir("answers");
        let q = open_dir(&state, true).unwrap();
        let id = "0123abcd";
        // Too large: refused, never read whole.
        fs::write(q.join(format!("{id}.answer")), vec![b' '; 5000]).unwrap();
        let a = read_answer(&q, id).unwrap();
        assert!(!a.approved && a.reason.contains("unusable"), "{a:?}");
        // A link is not followed.
        fs::remove_file(q.join(format!("{id}.answer"))).unwrap();
        let target = state.join("elsewhere");
        fs::write(&target, r#"{"approved": true}"#).unwrap();
        std::os::unix::fs::symlink(&target, q.join(format!("{id}.answer"))).unwrap();
        assert!(!read_answer(&q, id).unwrap().approved);
        // Writable by others: refused.
        fs::remove_file(q.join(format!("{id}.answer"))).unwrap();
        let p = q.join(format!("{id}.answer"));
        fs::write(&p, r#"{"approved": true}"#).unwrap();
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&p, fs::Permissions::from_mode(0o666)).unwrap();
        assert!(!read_answer(&q, id).unwrap().approved);
        // A FIFO does not block the reader.
        fs::remove_file(&p).unwrap();
        nix::unistd::mkfifo(&p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert!(!read_answer(&q, id).unwrap().approved);
        // A queue open to others is refused.
        fs::set_permissions(&q, fs::Permissions::from_mode(0o755)).unwrap();
        assert!(open_dir(&state, false).unwrap_err().contains("0700"));
        fs::remove_dir_all(&state).unwrap();
    }
}
