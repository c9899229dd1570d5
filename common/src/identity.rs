//! What a path is, checked by identity rather than by name.
//!
//! A sandbox may write trees that other sandboxes of the same run are later built from,
//! so a name in the plan can point somewhere else by the time a sandbox is built. When a
//! run starts, the broker records what every path the plan names was (device, inode,
//! type). Each sandbox opens the path without following a symbolic link at any component
//! (`openat2` with `RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`, in the shim's `sys`
//! module), compares, and binds from the descriptor; this module is the data and the
//! comparison.

use std::fmt;
use std::fs::Metadata;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The type of a file, as far as a sandbox's view cares.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    Socket,
    /// A device, a FIFO or a symbolic link.
    Other,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Dir => "directory",
            Kind::File => "file",
            Kind::Socket => "socket",
            Kind::Other => "special file",
        })
    }
}

/// What a path was: device, inode and type.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    pub dev: u64,
    pub ino: u64,
    pub kind: Kind,
}

impl Identity {
    /// From `fstat` of an (`O_PATH`) descriptor, never from a name.
    pub fn of(meta: &Metadata) -> Identity {
        Identity::from_stat(meta.dev(), meta.ino(), meta.mode())
    }

    /// From the fields of a `struct stat`.
    pub fn from_stat(dev: u64, ino: u64, mode: u32) -> Identity {
        const S_IFMT: u32 = 0o170000;
        let kind = match mode & S_IFMT {
            0o040000 => Kind::Dir,
            0o100000 => Kind::File,
            0o140000 => Kind::Socket,
            _ => Kind::Other,
        };
        Identity { dev, ino, kind }
    }
}

/// Identities recorded when the run started, by path (sorted, unique). Only
/// `collect` fills it: read from a frame or a file it is always empty, whatever
/// was sent (the entries are read and dropped, so the encoding is unchanged), so the
/// identities in a plan are the broker's own records and never the plan writer's.
#[derive(Serialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct Recorded(Vec<(PathBuf, Identity)>);

impl<'de> Deserialize<'de> for Recorded {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Recorded, D::Error> {
        Vec::<(PathBuf, Identity)>::deserialize(d).map(|_| Recorded::default())
    }
}

/// A path's bytes, the order [`Recorded`] keeps: comparing a thousand paths component
/// by component was most of the broker's own work for a profile that long.
fn bytes(p: &Path) -> &[u8] {
    use std::os::unix::ffi::OsStrExt;
    p.as_os_str().as_bytes()
}

impl FromIterator<(PathBuf, Identity)> for Recorded {
    /// Sorted once, each path's first identity kept. Inserting one by one moved the whole
    /// list each time: quadratic, most of a 3,000-path profile's start-up (issue 41).
    fn from_iter<I: IntoIterator<Item = (PathBuf, Identity)>>(entries: I) -> Recorded {
        let mut all: Vec<(PathBuf, Identity)> = entries.into_iter().collect();
        // Stable: of paths with the same bytes, the first recorded comes first, and stays.
        all.sort_by(|(a, _), (b, _)| bytes(a).cmp(bytes(b)));
        all.dedup_by(|later, first| bytes(&later.0) == bytes(&first.0));
        Recorded(all)
    }
}

impl Recorded {
    pub fn get(&self, path: &Path) -> Option<Identity> {
        self.0
            .binary_search_by(|(p, _)| bytes(p).cmp(bytes(path)))
            .ok()
            .map(|i| self.0[i].1)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Compare what `path` is now (`now`, from a descriptor opened without following links)
/// with what it was. The error is the one line a refused sandbox reports.
pub fn verify(path: &Path, was: Identity, now: io::Result<Identity>) -> Result<(), String> {
    match now {
        Ok(now) if now == was => Ok(()),
        Ok(now) => Err(format!(
            "{} changed since the run started (it was {}, it is now {}): a sandbox of this run may have replaced it; nothing was started",
            path.display(),
            was,
            now
        )),
        Err(e) if e.raw_os_error() == Some(libc_eloop()) => Err(format!(
            "{} changed since the run started: a symbolic link now stands on the way to it; nothing was started",
            path.display()
        )),
        Err(e) if out_of_descriptors(&e) => Err(no_descriptor_left(path, &e)),
        Err(e) => Err(format!(
            "{} changed since the run started: it cannot be opened now ({e}); nothing was started",
            path.display()
        )),
    }
}

/// EMFILE or ENFILE: the process, or the whole system, has no descriptor left. Nothing
/// about the path itself: said as such, never as a changed path.
pub fn out_of_descriptors(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// The one line for a path that could not be opened for want of a descriptor.
pub fn no_descriptor_left(path: &Path, e: &io::Error) -> String {
    let (limit, hint) = if e.raw_os_error() == Some(libc::ENFILE) {
        ("the system's", "close programs or raise fs.file-max")
    } else {
        (
            "this run's",
            "raise the hard limit (`ulimit -Hn`, as root) or name fewer paths in the profile",
        )
    };
    format!(
        "{} could not be opened: {limit} open-file limit is reached ({e}); {hint}, then run again; nothing was started",
        path.display()
    )
}

/// ELOOP, the error `RESOLVE_NO_SYMLINKS` gives for a link on the way.
const fn libc_eloop() -> i32 {
    40
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}:{}", self.kind, self.dev, self.ino)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_identities_never_come_from_input() {
        let forged = Identity {
            dev: 1,
            ino: 2,
            kind: Kind::Dir,
        };
        let sent: Recorded = [("/".into(), forged)].into_iter().collect();
        let json = serde_json::to_string(&sent).unwrap();
        assert!(json.contains("\"/\""), "{json}");
        let read: Recorded = serde_json::from_str(&json).unwrap();
        assert!(read.is_empty());
        // In the frame format too, and what follows it is still read.
        let frame =
            bincode::serde::encode_to_vec((&sent, 7u8), bincode::config::standard()).unwrap();
        let ((read, after), _): ((Recorded, u8), usize) =
            bincode::serde::decode_from_slice(&frame, bincode::config::standard()).unwrap();
        assert!(read.is_empty());
        assert_eq!(after, 7);
    }

    fn id(ino: u64, kind: Kind) -> Identity {
        Identity { dev: 1, ino, kind }
    }

    #[test]
    fn recorded_is_a_sorted_map_keeping_the_first() {
        // Whatever the order the paths come in: sorted, each once, the first identity kept.
        let entries = [
            ("/b", id(2, Kind::Dir)),
            ("/a/x", id(3, Kind::File)),
            ("/a", id(1, Kind::Dir)),
            ("/b", id(9, Kind::File)),
        ];
        let r: Recorded = entries.iter().map(|(p, i)| (p.into(), *i)).collect();
        assert_eq!(r.get(Path::new("/a")), Some(id(1, Kind::Dir)));
        assert_eq!(r.get(Path::new("/b")), Some(id(2, Kind::Dir)));
        assert_eq!(r.get(Path::new("/a/x")), Some(id(3, Kind::File)));
        assert_eq!(r.get(Path::new("/c")), None);
        assert_eq!(r.len(), 3);
        let paths: Vec<&Path> = r.0.iter().map(|(p, _)| p.as_path()).collect();
        assert_eq!(paths, [Path::new("/a"), Path::new("/a/x"), Path::new("/b")]);
        // Spellings `Path` takes as equal are different keys here, each found as written
        // (a review found `/a//b` dropped beside `/a/b`, and its sandbox refused).
        let spelled = [("/a//b", id(4, Kind::Dir)), ("/a/b", id(4, Kind::Dir))];
        let r: Recorded = spelled.iter().map(|(p, i)| (p.into(), *i)).collect();
        assert_eq!(r.get(Path::new("/a//b")), Some(id(4, Kind::Dir)));
        assert_eq!(r.get(Path::new("/a/b")), Some(id(4, Kind::Dir)));
        let r: Recorded = [("/r/0/", id(5, Kind::Dir)), ("/r/0", id(5, Kind::Dir))]
            .iter()
            .map(|(p, i)| (p.into(), *i))
            .collect();
        assert_eq!(r.len(), 2);
    }

    #[test]
    fn a_change_is_one_line_naming_the_path() {
        let p = Path::new("/p/target");
        assert!(verify(p, id(1, Kind::Dir), Ok(id(1, Kind::Dir))).is_ok());
        let e = verify(p, id(1, Kind::Dir), Ok(id(2, Kind::Dir))).unwrap_err();
        assert!(
            e.starts_with("/p/target changed since the run started"),
            "{e}"
        );
        let e = verify(p, id(1, Kind::Dir), Err(io::Error::from_raw_os_error(40))).unwrap_err();
        assert!(e.contains("symbolic link"), "{e}");
        assert!(!e.contains('\n'));
    }

    #[test]
    fn no_descriptor_left_is_said_as_such_not_as_a_changed_path() {
        let was = Identity {
            dev: 1,
            ino: 2,
            kind: Kind::Dir,
        };
        let emfile = io::Error::from_raw_os_error(libc::EMFILE);
        let e = verify(Path::new("/usr/sbin"), was, Err(emfile)).unwrap_err();
        assert!(
            e.starts_with("/usr/sbin could not be opened: this run's open-file limit is reached"),
            "{e}"
        );
        assert!(!e.contains("changed"), "{e}");
        let enfile = io::Error::from_raw_os_error(libc::ENFILE);
        let e = verify(Path::new("/usr/sbin"), was, Err(enfile)).unwrap_err();
        assert!(e.contains("the system's open-file limit is reached"), "{e}");
    }
}
