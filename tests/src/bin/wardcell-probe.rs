//! wardcell-probe: runs inside a sandbox under test and tries one thing a sandboxed
//! process should (or should not) be able to do. Prints `ok` or `err NAME (errno)` and
//! exits 0 or 1, so tests can assert on exactly what the kernel answered.
//!
//! This is test code that deliberately makes raw system calls with hostile arguments.

use std::ffi::CString;
use std::io::{Read, Write};

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn name(e: i32) -> &'static str {
    match e {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::ESRCH => "ESRCH",
        libc::EACCES => "EACCES",
        libc::EEXIST => "EEXIST",
        libc::EXDEV => "EXDEV",
        libc::EINVAL => "EINVAL",
        libc::ENOTTY => "ENOTTY",
        libc::ENOSYS => "ENOSYS",
        libc::EROFS => "EROFS",
        libc::EBUSY => "EBUSY",
        libc::EAFNOSUPPORT => "EAFNOSUPPORT",
        libc::ENETUNREACH => "ENETUNREACH",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::EBADF => "EBADF",
        _ => "OTHER",
    }
}

fn report(ret: i64) -> ! {
    if ret < 0 {
        let e = errno();
        println!("err {} ({e})", name(e));
        std::process::exit(1)
    }
    println!("ok");
    std::process::exit(0)
}

fn report_io<T>(r: std::io::Result<T>) -> ! {
    match r {
        Ok(_) => report(0),
        Err(e) => {
            let n = e.raw_os_error().unwrap_or(0);
            println!("err {} ({n})", name(n));
            std::process::exit(1)
        }
    }
}

/// One byte 'F' with `fds` as SCM_RIGHTS.
fn send_fds(sock: i32, fds: &[i32]) {
    let mut byte = *b"F";
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let bytes = std::mem::size_of_val(fds);
    let mut space = vec![0u64; 512];
    // SAFETY: msghdr is plain old data.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = space.as_mut_ptr().cast();
    // SAFETY: arithmetic.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(bytes as u32) } as _;
    // SAFETY: one header in a buffer far larger than it needs; the data follows it.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(bytes as u32) as _;
        std::ptr::copy_nonoverlapping(fds.as_ptr().cast::<u8>(), libc::CMSG_DATA(c), bytes);
    }
    // SAFETY: msg points at live buffers.
    if unsafe { libc::sendmsg(sock, &msg, 0) } < 0 {
        eprintln!("sendmsg: {}", std::io::Error::last_os_error());
    }
}

/// Make system call `nr` fail with ENOSYS in this process and all it starts.
fn enosys(nr: u32) {
    #[cfg(target_arch = "x86_64")]
    const ARCH: u32 = 0xc000_003e; // AUDIT_ARCH_X86_64
    #[cfg(target_arch = "aarch64")]
    const ARCH: u32 = 0xc000_00b7; // AUDIT_ARCH_AARCH64
    let op = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
    let (ld, jeq, ret) = (0x20, 0x15, 0x06); // BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, BPF_RET|BPF_K
    let prog = [
        op(ld, 0, 0, 4),     // the architecture
        op(jeq, 0, 3, ARCH), // another: allowed
        op(ld, 0, 0, 0),     // the system call's number
        op(jeq, 0, 1, nr),
        op(ret, 0, 0, 0x0005_0000 | libc::ENOSYS as u32), // SECCOMP_RET_ERRNO
        op(ret, 0, 0, 0x7fff_0000),                       // SECCOMP_RET_ALLOW
    ];
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: prctl with integer arguments; the program outlives the call, which copies it.
    let ok = unsafe {
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
            && libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &fprog) == 0
    };
    if !ok {
        eprintln!("seccomp: {}", std::io::Error::last_os_error());
        std::process::exit(126);
    }
}

fn c(s: &str) -> CString {
    CString::new(s).expect("no NUL")
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let a = |i: usize| args.get(i).cloned().unwrap_or_default();
    let num = |i: usize| a(i).parse::<i64>().expect("a number");
    match a(0).as_str() {
        "status" => {
            let s = std::fs::read_to_string("/proc/self/status").unwrap();
            for line in s.lines() {
                if line.starts_with("Cap")
                    || line.starts_with("NoNewPrivs")
                    || line.starts_with("Seccomp")
                {
                    println!("{line}");
                }
            }
        }
        // ws HOST PORT PATH MSG...: a WebSocket conversation through the zone's proxy
        // (HTTPS_PROXY, CONNECT), over TLS verified against SSL_CERT_FILE, with
        // `Authorization: Bearer $OPENAI_API_KEY`. Prints every message the server sends,
        // one a line, sending MSG... in turn after the first one.
        "ws" => ws(&a(1), num(2) as u16, &a(3), &args[4.min(args.len())..]),
        // ws-many HOST PORT PATH N: N WebSocket conversations opened and held at once;
        // prints how many opened and how many were refused, then closes them all.
        "ws-many" => ws_many(&a(1), num(2) as u16, &a(3), num(4) as usize),
        "fds" => {
            let mut fds: Vec<i32> = std::fs::read_dir("/proc/self/fd")
                .unwrap()
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect();
            fds.sort();
            // The highest is the directory read_dir itself holds open.
            fds.pop();
            println!("{fds:?}");
        }
        "tiocsti" => {
            let ch: libc::c_char = b'x' as libc::c_char;
            // High bits set above the 32-bit request must not slip past the filter.
            // The raw system call, so that no C library narrows the request to 32 bits.
            #[allow(clippy::unnecessary_cast)]
            let tiocsti = libc::TIOCSTI as libc::c_long;
            let req = if a(1) == "high" {
                tiocsti | 0x1_0000_0000
            } else {
                tiocsti
            };
            // SAFETY: TIOCSTI reads one char from `ch`.
            report(unsafe { libc::syscall(libc::SYS_ioctl, 0, req, &ch) })
        }
        "unshare" => {
            let flag = match a(1).as_str() {
                "user" => libc::CLONE_NEWUSER,
                "net" => libc::CLONE_NEWNET,
                "mount" => libc::CLONE_NEWNS,
                "pid" => libc::CLONE_NEWPID,
                other => panic!("unknown namespace {other}"),
            };
            // SAFETY: integer argument.
            report(unsafe { libc::unshare(flag) } as i64)
        }
        "clone-newuser" => {
            // A raw clone with CLONE_NEWUSER; the child exits at once if it ever exists.
            // SAFETY: fork-like clone (no CLONE_VM, no stack); the child only _exits.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_clone,
                    (libc::CLONE_NEWUSER | libc::SIGCHLD) as libc::c_ulong,
                    0usize,
                    0usize,
                    0usize,
                    0usize,
                )
            };
            if r == 0 {
                // SAFETY: _exit in the child.
                unsafe { libc::_exit(0) };
            }
            report(r)
        }
        "clone3" => {
            let mut args = [0u64; 11];
            args[4] = libc::SIGCHLD as u64;
            // SAFETY: fork-like clone3 (no CLONE_VM, no stack); the child only _exits.
            let r = unsafe { libc::syscall(libc::SYS_clone3, args.as_mut_ptr(), 88usize) };
            if r == 0 {
                // SAFETY: _exit in the child.
                unsafe { libc::_exit(0) };
            }
            report(r)
        }
        "mount-tmpfs" => {
            let target = c(&a(1));
            // SAFETY: valid C strings; null data.
            report(unsafe {
                libc::mount(
                    c"tmpfs".as_ptr(),
                    target.as_ptr(),
                    c"tmpfs".as_ptr(),
                    0,
                    std::ptr::null(),
                )
            } as i64)
        }
        "umount" => {
            let target = c(&a(1));
            // SAFETY: valid C string.
            report(unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) } as i64)
        }
        "ptrace" => {
            // SAFETY: PTRACE_ATTACH takes a pid; null addr and data.
            report(unsafe {
                libc::ptrace(
                    libc::PTRACE_ATTACH,
                    num(1) as libc::pid_t,
                    std::ptr::null_mut::<libc::c_void>(),
                    std::ptr::null_mut::<libc::c_void>(),
                )
            })
        }
        "kill" => {
            // SAFETY: integer arguments.
            report(unsafe { libc::kill(num(1) as libc::pid_t, libc::SIGTERM) } as i64)
        }
        "procmem" => report_io(std::fs::File::open(format!("/proc/{}/mem", a(1)))),
        "tcp" => report_io(std::net::TcpStream::connect((a(1).as_str(), num(2) as u16))),
        "udp" => {
            let s = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
            report_io(s.send_to(b"wardcell-probe", (a(1).as_str(), num(2) as u16)))
        }
        "socket" => {
            // SAFETY: integer arguments; the fd (if any) is leaked to process exit.
            report(unsafe { libc::socket(num(1) as i32, libc::SOCK_DGRAM, 0) } as i64)
        }
        "socket-proto" => {
            // A stream socket of a family and protocol: `socket-proto 2 262` is MPTCP.
            // SAFETY: integer arguments; the fd (if any) is leaked to process exit.
            report(unsafe { libc::socket(num(1) as i32, libc::SOCK_STREAM, num(2) as i32) } as i64)
        }
        "enosys" => {
            // `enosys NR PROG ARGS...`: PROG run where system call NR answers ENOSYS, as
            // on a kernel without it (a seccomp filter, inherited by all it starts).
            enosys(num(1) as u32);
            use std::os::unix::process::CommandExt;
            let e = std::process::Command::new(a(2)).args(&args[3..]).exec();
            eprintln!("exec {}: {e}", a(2));
            std::process::exit(127);
        }
        "syscall" => {
            let nr = match a(1).as_str() {
                "io_uring_setup" => libc::SYS_io_uring_setup,
                "bpf" => libc::SYS_bpf,
                "keyctl" => libc::SYS_keyctl,
                "userfaultfd" => libc::SYS_userfaultfd,
                "perf_event_open" => libc::SYS_perf_event_open,
                "setns" => libc::SYS_setns,
                "process_vm_readv" => libc::SYS_process_vm_readv,
                "x32_getpid" => 0x4000_0000 | 39,
                other => panic!("unknown syscall {other}"),
            };
            // SAFETY: zero/null arguments; every one of these fails or is harmless with them.
            report(unsafe { libc::syscall(nr, 0usize, 0usize, 0usize, 0usize, 0usize) })
        }
        "write" => report_io(
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(true)
                .write(true)
                .open(a(1))
                .and_then(|mut f| f.write_all(a(2).as_bytes())),
        ),
        "read" => {
            let mut s = String::new();
            match std::fs::File::open(a(1)).and_then(|mut f| f.read_to_string(&mut s)) {
                Ok(_) => {
                    println!("ok {s}");
                }
                Err(e) => report_io::<()>(Err(e)),
            }
        }
        // Hold a write lease on a file for SECS seconds, SIGIO ignored: another open of it
        // with O_NONBLOCK fails with EWOULDBLOCK meanwhile (a lease the sandbox may take).
        "lease" => {
            let f = std::fs::File::open(a(1)).expect("open the file to lease");
            // SAFETY: ignoring a signal and a fcntl on a descriptor this process owns.
            let r = unsafe {
                libc::signal(libc::SIGIO, libc::SIG_IGN);
                libc::fcntl(
                    std::os::fd::AsRawFd::as_raw_fd(&f),
                    libc::F_SETLEASE,
                    libc::F_WRLCK,
                )
            };
            if r < 0 {
                report(r as i64);
            }
            println!("leased");
            std::thread::sleep(std::time::Duration::from_secs(num(2) as u64));
            drop(f);
        }
        "truncate" => {
            let p = c(&a(1));
            // SAFETY: valid C string.
            report(unsafe { libc::truncate(p.as_ptr(), 0) } as i64)
        }
        "link" => report_io(std::fs::hard_link(a(1), a(2))),
        "chmod" => {
            use std::os::unix::fs::PermissionsExt;
            let mode = u32::from_str_radix(&a(2), 8).expect("an octal mode");
            report_io(std::fs::set_permissions(
                a(1),
                std::fs::Permissions::from_mode(mode),
            ))
        }
        "utime" => {
            let p = c(&a(1));
            // SAFETY: a valid C string and a null times pointer (now).
            report(
                unsafe { libc::utimensat(libc::AT_FDCWD, p.as_ptr(), std::ptr::null(), 0) } as i64,
            )
        }
        "rename" => report_io(std::fs::rename(a(1), a(2))),
        "mkdir" => report_io(std::fs::create_dir_all(a(1))),
        "connect-unix" => report_io(std::os::unix::net::UnixStream::connect(a(1))),
        "connect-silent" => {
            // Connect, send nothing, and report how long until the other side closes.
            let start = std::time::Instant::now();
            let mut s = std::os::unix::net::UnixStream::connect(a(1)).expect("connect");
            println!("connected");
            let mut sink = Vec::new();
            let _ = s.read_to_end(&mut sink);
            println!("closed after {} ms", start.elapsed().as_millis());
        }
        "connect-stall" => {
            // Connect, send one byte (the start of a request), and report how long until
            // the other side closes: a request that never comes whole.
            let start = std::time::Instant::now();
            let mut s = std::os::unix::net::UnixStream::connect(a(1)).expect("connect");
            s.write_all(&[1]).expect("one byte");
            println!("connected");
            let mut sink = Vec::new();
            let _ = s.read_to_end(&mut sink);
            println!("closed after {} ms", start.elapsed().as_millis());
        }
        "connect-hold" => {
            // Open N connections that stay silent, say so, and hold them for MS.
            let held: Vec<_> = (0..num(2))
                .map(|_| std::os::unix::net::UnixStream::connect(a(1)).expect("connect"))
                .collect();
            println!("held {}", held.len());
            std::thread::sleep(std::time::Duration::from_millis(num(3) as u64));
        }
        "connect-churn" => {
            // Connect and close at once, again and again for MS milliseconds; print how
            // many connections were made.
            let until = std::time::Instant::now() + std::time::Duration::from_millis(num(2) as u64);
            let mut n = 0u64;
            while std::time::Instant::now() < until {
                if std::os::unix::net::UnixStream::connect(a(1)).is_ok() {
                    n += 1;
                }
            }
            println!("connections {n}");
        }
        "connect-many" => {
            // Open N connections that stay silent; print what the last one is told.
            let n = num(2) as usize;
            let mut held = Vec::new();
            // The supervisor accepts in the order of connection, one at a time: once
            // connect returns, the connection is counted before any made later.
            for _ in 0..n {
                held.push(std::os::unix::net::UnixStream::connect(a(1)).expect("connect"));
            }
            let last = held.last_mut().expect("at least one");
            last.set_read_timeout(Some(std::time::Duration::from_secs(2)))
                .unwrap();
            let mut got = vec![0u8; 4096];
            let mut all = Vec::new();
            while let Ok(k) = last.read(&mut got) {
                if k == 0 {
                    break;
                }
                all.extend_from_slice(&got[..k]);
            }
            println!("last got: {}", String::from_utf8_lossy(&all));
        }
        "open_tree_attr" => {
            // Syscall 467 (Linux 6.15), newer than the reviewed table: with no flags it
            // returns an O_PATH descriptor to the path, so success is visible.
            // SAFETY: a valid C string and a null attribute pointer of size 0.
            report(unsafe {
                libc::syscall(
                    467,
                    libc::AT_FDCWD,
                    c"/".as_ptr(),
                    0usize,
                    std::ptr::null::<u8>(),
                    0usize,
                )
            })
        }
        "syscall-nr" => {
            // SAFETY: zero arguments to a number no table names.
            report(unsafe { libc::syscall(num(1), 0usize, 0usize, 0usize, 0usize, 0usize) })
        }
        "with-stdin" => {
            // Open a(1) as stdin, O_PATH when a(2) is "opath" (else read-only, as a shell's
            // `< dir` would), then exec the rest of the arguments.
            let path = c(&a(1));
            let flags = if a(2) == "opath" {
                libc::O_PATH
            } else {
                libc::O_RDONLY
            };
            // SAFETY: a valid C string; the descriptor becomes fd 0.
            let fd = unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC) };
            // SAFETY: integer arguments; dup2 clears close-on-exec on the copy.
            if fd < 0 || unsafe { libc::dup2(fd, 0) } != 0 {
                report(-1)
            }
            let err = std::os::unix::process::CommandExt::exec(
                std::process::Command::new(a(3)).args(&args[4..]),
            );
            eprintln!("wardcell-probe: exec {}: {err}", a(3));
            std::process::exit(127)
        }
        "sigint-watch" => {
            // Catch SIGINT (whatever its inherited disposition), say we are running, and
            // after a second say whether one arrived.
            static CAUGHT: std::sync::atomic::AtomicBool =
                std::sync::atomic::AtomicBool::new(false);
            extern "C" fn on_int(_: libc::c_int) {
                CAUGHT.store(true, std::sync::atomic::Ordering::SeqCst);
            }
            // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
            unsafe { libc::signal(libc::SIGINT, on_int as *const () as libc::sighandler_t) };
            println!("started");
            // The window in which a forwarded SIGINT would arrive: what is tested is that
            // none does, and an absence cannot be waited for.
            std::thread::sleep(std::time::Duration::from_secs(1));
            let caught = CAUGHT.load(std::sync::atomic::Ordering::SeqCst);
            println!("{}", if caught { "caught" } else { "not caught" });
        }
        "enter-extra-fds" => {
            // COUNT connections to the supervisor at a(1), each a valid `Enter` followed
            // by N descriptors where 3 are expected (alternately N and N+12, so that some
            // control messages are truncated too).
            // With a 4th argument, `closed` is that (else 0).
            let (n, count) = (num(2) as usize, num(3) as usize);
            let closed = std::env::args()
                .nth(5)
                .map_or(0, |c| c.parse::<u8>().expect("closed"));
            for i in 0..count {
                let mut s = std::os::unix::net::UnixStream::connect(a(1)).expect("connect");
                // The supervisor's Hello, sent back as ours (whatever the version).
                let mut frames = read_frame(&mut s);
                // Enter { zone: "push", argv: ["true"], env: [], closed: 0 }
                frames.extend([14, 0, 0, 0, 1, 4]);
                frames.extend(b"push");
                frames.extend([1, 4]);
                frames.extend(b"true");
                frames.extend([0, closed]);
                s.write_all(&frames).expect("write");
                let fds = vec![0; if i % 2 == 0 { n } else { n + 12 }];
                send_fds(std::os::fd::AsRawFd::as_raw_fd(&s), &fds);
                let mut sink = Vec::new();
                let _ = s.read_to_end(&mut sink);
            }
            println!("sent {count}");
        }
        "enter-then-speak" => {
            // Enter { zone: "push", argv: ["sleep", "30"] } on the supervisor at a(1) with
            // our fds 0 to 2; once `Started` comes, send our Hello again (a message out of
            // turn while the entry runs), then read to the end: prints what came after.
            // With a 3rd argument `early`, sends it before any answer instead.
            let mut s = std::os::unix::net::UnixStream::connect(a(1)).expect("connect");
            let mut frames = read_frame(&mut s);
            let hello = frames.clone();
            frames.extend([18, 0, 0, 0, 1, 4]);
            frames.extend(b"push");
            frames.extend([2, 5]);
            frames.extend(b"sleep");
            frames.extend([2]);
            frames.extend(b"30");
            frames.extend([0, 0]);
            s.write_all(&frames).expect("write");
            send_fds(std::os::fd::AsRawFd::as_raw_fd(&s), &[0, 1, 2]);
            if std::env::args().nth(3).as_deref() == Some("early") {
                // At once, while the entry is being decided: print what is answered.
                s.write_all(&hello).expect("write out of turn");
                let mut rest = Vec::new();
                let _ = s.read_to_end(&mut rest);
                println!("answered {}", String::from_utf8_lossy(&rest));
                return;
            }
            let started = read_frame(&mut s);
            println!("answer {started:?}");
            let t = std::time::Instant::now();
            s.write_all(&hello).expect("write out of turn");
            let mut rest = Vec::new();
            let _ = s.read_to_end(&mut rest);
            println!("after {} bytes in {} s", rest.len(), t.elapsed().as_secs());
        }
        "flood" => {
            // Connect to the socket at a(1) and close at once, as fast as possible, for
            // a(2) seconds; prints how many connections were made.
            let until = std::time::Instant::now() + std::time::Duration::from_secs(num(2) as u64);
            let mut n = 0u64;
            while std::time::Instant::now() < until {
                if std::os::unix::net::UnixStream::connect(a(1)).is_ok() {
                    n += 1;
                }
            }
            println!("flooded {n}");
        }
        "subreaper" => {
            // As a CI runner or an init system: a subreaper runs CMD (the rest of the
            // arguments) and waits for it; then, after a moment, counts the processes left
            // to it to reap (orphans of CMD reparented here). Prints `orphans=N`.
            // SAFETY: integer arguments only.
            let made = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
            assert_eq!(made, 0);
            let status = std::process::Command::new(a(1))
                .args(&args[2..])
                .status()
                .unwrap();
            std::thread::sleep(std::time::Duration::from_millis(300));
            let mut orphans = 0;
            loop {
                let mut st = 0;
                // SAFETY: waitpid writes one int.
                let pid = unsafe { libc::waitpid(-1, &mut st, libc::WNOHANG) };
                if pid <= 0 {
                    break;
                }
                orphans += 1;
            }
            // Still running ones count too (not zombies yet).
            let me = std::process::id();
            let children = std::fs::read_to_string(format!("/proc/{me}/task/{me}/children"))
                .unwrap_or_default();
            orphans += children.split_whitespace().count();
            println!("status={} orphans={orphans}", status.code().unwrap_or(-1));
        }
        "shm-create" => {
            // SAFETY: integer arguments; creates a System V segment under the key.
            report(
                unsafe { libc::shmget(num(1) as libc::key_t, 4096, libc::IPC_CREAT | 0o600) }
                    as i64,
            )
        }
        "shm-find" => {
            // SAFETY: integer arguments; only looks the key up.
            report(unsafe { libc::shmget(num(1) as libc::key_t, 0, 0) } as i64)
        }
        "shm-remove" => {
            // SAFETY: integer arguments; finds and removes the segment.
            let id = unsafe { libc::shmget(num(1) as libc::key_t, 0, 0) };
            // SAFETY: IPC_RMID with a null buffer.
            report(unsafe { libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()) } as i64)
        }
        "fork-loop" => {
            // Start up to N children that wait, until a fork fails; print how many
            // started and the errno that stopped it; with a second argument, hold them
            // until that file exists (the test has sampled the host's count: 60 s at
            // most); then end them.
            let mut kids = Vec::new();
            let mut failed = 0;
            while kids.len() < num(1) as usize {
                // SAFETY: the child only waits to be killed.
                match unsafe { libc::fork() } {
                    0 => loop {
                        // SAFETY: no arguments.
                        unsafe { libc::pause() };
                    },
                    -1 => {
                        failed = errno();
                        break;
                    }
                    pid => kids.push(pid),
                }
            }
            println!("forked {} errno {failed}", kids.len());
            let _ = std::io::stdout().flush();
            let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
            while !a(2).is_empty()
                && !std::path::Path::new(&a(2)).exists()
                && std::time::Instant::now() < until
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            for pid in &kids {
                // SAFETY: a child of ours.
                unsafe { libc::kill(*pid, libc::SIGKILL) };
            }
            std::process::exit(0)
        }
        "alloc" => {
            // Allocate N MiB one at a time, touching every page; say how far it got.
            let mut held: Vec<Vec<u8>> = Vec::new();
            for i in 0..num(1) {
                let mut chunk: Vec<u8> = Vec::new();
                if chunk.try_reserve_exact(1 << 20).is_err() {
                    println!("err at {i} MiB");
                    std::process::exit(1);
                }
                chunk.resize(1 << 20, 1);
                held.push(chunk);
            }
            println!("ok {} MiB", held.len());
            std::process::exit(0)
        }
        "heartbeat" => {
            // Write a counter to a file every 20 ms until killed, holding the file open
            // all along: a test sees the writer in /proc until it has ended. (Fixed
            // width, written in place: a reader never finds it empty.)
            use std::os::unix::fs::FileExt;
            let beat = std::fs::File::create(a(1)).expect("create the heartbeat file");
            let mut n = 0u64;
            loop {
                let _ = beat.write_all_at(format!("{n:020}").as_bytes(), 0);
                n += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
        other => {
            eprintln!("wardcell-probe: unknown probe {other:?}");
            std::process::exit(2);
        }
    }
}

/// One frame as it came (its length prefix and its payload): the supervisor's Hello, sent
/// back as ours whatever it says, or its first answer.
fn read_frame(s: &mut std::os::unix::net::UnixStream) -> Vec<u8> {
    let mut frame = vec![0u8; 4];
    s.read_exact(&mut frame).expect("a frame's length");
    let len = u32::from_le_bytes(frame[..4].try_into().unwrap()) as usize;
    frame.resize(4 + len, 0);
    s.read_exact(&mut frame[4..]).expect("a frame");
    frame
}

type Ws =
    tungstenite::WebSocket<rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream>>;

/// One WebSocket opened through the zone's proxy: the socket and the handshake's status,
/// or why not (the CONNECT's or the handshake's answer).
fn ws_open(host: &str, port: u16, path: &str) -> Result<(Ws, u16), String> {
    use std::sync::Arc;
    use tungstenite::client::IntoClientRequest;
    let proxy = std::env::var("HTTPS_PROXY").expect("HTTPS_PROXY is set");
    let proxy = proxy.trim_start_matches("http://").trim_end_matches('/');
    let mut tcp = std::net::TcpStream::connect(proxy).map_err(|e| format!("proxy: {e}"))?;
    write!(
        tcp,
        "CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n"
    )
    .unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if tcp.read(&mut b).unwrap_or(0) != 1 {
            return Err("the proxy closed during CONNECT".into());
        }
        head.push(b[0]);
    }
    let head = String::from_utf8_lossy(&head);
    if !head.starts_with("HTTP/1.1 200") {
        return Err(format!(
            "connect refused: {}",
            head.lines().next().unwrap_or_default()
        ));
    }
    let mut roots = rustls::RootCertStore::empty();
    let bundle = std::env::var("SSL_CERT_FILE").expect("SSL_CERT_FILE is set");
    use rustls::pki_types::pem::PemObject;
    for c in rustls::pki_types::CertificateDer::pem_file_iter(&bundle).unwrap() {
        let _ = roots.add(c.unwrap());
    }
    let cfg = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(host.to_string()).unwrap();
    let conn = rustls::ClientConnection::new(Arc::new(cfg), name).unwrap();
    let tls = rustls::StreamOwned::new(conn, tcp);
    let mut req = format!("wss://{host}:{port}{path}")
        .into_client_request()
        .unwrap();
    let key = std::env::var("OPENAI_API_KEY").unwrap_or_default();
    req.headers_mut()
        .insert("authorization", format!("Bearer {key}").parse().unwrap());
    match tungstenite::client(req, tls) {
        Ok((sock, resp)) => Ok((sock, resp.status().as_u16())),
        Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(resp))) => {
            Err(format!("handshake answered {}", resp.status().as_u16()))
        }
        Err(e) => Err(format!("handshake failed: {e}")),
    }
}

fn ws_many(host: &str, port: u16, path: &str, n: usize) {
    let mut open = Vec::new();
    let mut refused: std::collections::BTreeMap<String, usize> = Default::default();
    for _ in 0..n {
        match ws_open(host, port, path) {
            Ok((sock, _)) => open.push(sock),
            Err(why) => *refused.entry(why).or_default() += 1,
        }
    }
    println!("opened {}", open.len());
    for (why, count) in refused {
        println!("refused {count}: {why}");
    }
    for mut s in open {
        let _ = s.close(None);
    }
}

fn ws(host: &str, port: u16, path: &str, msgs: &[String]) {
    use tungstenite::Message;
    let (mut sock, status) = match ws_open(host, port, path) {
        Ok(x) => x,
        Err(why) => {
            println!("{why}");
            std::process::exit(1);
        }
    };
    println!("status {status}");
    let mut pending = msgs.iter();
    loop {
        match sock.read() {
            Ok(Message::Text(t)) => {
                println!("got {t}");
                match pending.next() {
                    Some(m) => sock.send(Message::text(m.as_str())).unwrap(),
                    None => {
                        let _ = sock.close(None);
                    }
                }
            }
            Ok(Message::Binary(b)) => println!("got {} binary bytes", b.len()),
            Ok(Message::Close(_)) | Err(tungstenite::Error::ConnectionClosed) => break,
            Ok(_) => {}
            Err(e) => {
                println!("error {e}");
                std::process::exit(1);
            }
        }
    }
    println!("closed");
}
