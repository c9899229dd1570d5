//! The standard descriptors that are terminals, for the client and the shim (the
//! broker's are `wardcell_common::terminal`).

use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use wardcell_common::terminal::std_ttys;

/// Call `f` with standard descriptor `fd` (0, 1, else 2) borrowed.
pub fn with_std<R>(fd: i32, f: impl FnOnce(BorrowedFd<'_>) -> R) -> R {
    match fd {
        0 => f(io::stdin().as_fd()),
        1 => f(io::stdout().as_fd()),
        _ => f(io::stderr().as_fd()),
    }
}

/// The first of descriptors 0, 1 and 2 that is a terminal (in a sandbox with a pty: the
/// pty's slave), or 0.
pub fn first_std_tty() -> i32 {
    match std_ttys() {
        0 => 0,
        t => t.trailing_zeros() as i32,
    }
}
