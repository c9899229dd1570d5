//! A path found not to be what it was when the run started: the one line a refused
//! sandbox reports (the comparison of `wardcell_common::identity`, made by the shim).

use std::io;
use std::path::Path;

use wardcell_common::identity::Identity;

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

#[cfg(test)]
mod tests {
    use super::*;
    use wardcell_common::identity::Kind;

    fn id(ino: u64, kind: Kind) -> Identity {
        Identity { dev: 1, ino, kind }
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
