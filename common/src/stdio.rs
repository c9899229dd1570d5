//! Which of descriptors 0, 1 and 2 a process was started without.
//!
//! The Rust runtime opens /dev/null in their place before `main`; a command run with
//! `>&-` must find its stdout closed, as it would without wardcell. The note has to be
//! taken from `.init_array`, before the runtime starts, and a static in a library crate is
//! not reliably linked: so each binary expands [`closed_stdio_at_start!`] in its `sys`
//! module (the one place its `unsafe`-class attributes may live).

/// Defines, in the calling module, `closed_at_start() -> u8` (bit N set when descriptor N
/// was closed when the process started) and the `.init_array` entry that notes it. The
/// caller must depend on `nix`.
#[macro_export]
macro_rules! closed_stdio_at_start {
    () => {
        /// Which of descriptors 0, 1 and 2 were closed when this process started (bit N
        /// for fd N): see `wardcell_common::stdio`.
        pub fn closed_at_start() -> u8 {
            CLOSED_AT_START.load(::std::sync::atomic::Ordering::Relaxed)
        }

        static CLOSED_AT_START: ::std::sync::atomic::AtomicU8 =
            ::std::sync::atomic::AtomicU8::new(0);

        /// Run by the C library (on macOS, dyld) before `main`, so before the Rust
        /// runtime fills the gaps.
        #[used]
        #[cfg_attr(not(target_vendor = "apple"), link_section = ".init_array")]
        #[cfg_attr(target_vendor = "apple", link_section = "__DATA,__mod_init_func")]
        static NOTE_CLOSED_STDIO: extern "C" fn() = note_closed_stdio;

        extern "C" fn note_closed_stdio() {
            let closed = (0..3)
                .filter(|&fd| {
                    ::nix::fcntl::fcntl(fd, ::nix::fcntl::FcntlArg::F_GETFD)
                        == Err(::nix::errno::Errno::EBADF)
                })
                .fold(0u8, |m, fd| m | 1 << fd);
            CLOSED_AT_START.store(closed, ::std::sync::atomic::Ordering::Relaxed);
        }
    };
}
