//! What a path is, checked by identity rather than by name.
//!
//! A sandbox may write trees that other sandboxes of the same run are later built from,
//! so a name in the plan can point somewhere else by the time a sandbox is built. When a
//! run starts, its plan writer records what every path the plan names was (device, inode,
//! type). Each sandbox opens the path without following a symbolic link at any component
//! (`openat2` with `RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`, in the shim's `sys`
//! module), compares, and binds from the descriptor; this module is the data and the
//! comparison.

use std::fmt;
use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;

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

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}:{}", self.kind, self.dev, self.ino)
    }
}
