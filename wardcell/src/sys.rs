//! The client's one call that needs `unsafe`: fork, made while the process has a single
//! thread.
#![allow(unsafe_code)]

use nix::unistd::{ForkResult, Pid};

pub enum Forked {
    Parent(Pid),
    Child,
}

/// Fork. Must be called before the client starts any thread (it is called from `main`
/// before anything but reading the environment and the arguments has happened).
pub fn fork() -> nix::Result<Forked> {
    // SAFETY: the process has one thread (nothing has started another), so the child is a
    // complete copy: no lock in it can be held by a thread that does not exist there, and
    // it may go on running ordinary Rust code.
    match unsafe { nix::unistd::fork() }? {
        ForkResult::Parent { child } => Ok(Forked::Parent(child)),
        ForkResult::Child => Ok(Forked::Child),
    }
}
