//! The smoke test's signals: on SIGINT, SIGTERM or SIGHUP, what the run
//! wrote is undone and the process exits as shells report a signal.

use std::io::Write;

/// The write end of the pipe through which the signal handler wakes the
/// cleanup thread (-1 until there is one).
static WAKE_FD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

/// The signals that end a run with its files cleaned up.
const CLEANUP_SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

extern "C" fn on_signal(sig: libc::c_int) {
    // Only async-signal-safe work: one write(2) of the signal's number to a
    // non-blocking pipe, errno kept as it was.
    let fd = WAKE_FD.load(std::sync::atomic::Ordering::SeqCst);
    if fd >= 0 {
        let b = sig as u8;
        // SAFETY: errno is this thread's; write(2) is async-signal-safe, and
        // `b` is a live byte on this stack.
        unsafe {
            let errno = *libc::__errno_location();
            libc::write(fd, (&b as *const u8).cast(), 1);
            *libc::__errno_location() = errno;
        }
    }
}

/// On SIGINT, SIGTERM or SIGHUP: undo what the run wrote (rendezvous files,
/// the NCCL log directory) and exit with 128 + the signal's number (130,
/// 143, 129, as shells report them), whatever the run is blocked on. The
/// handler only writes to a pipe; a thread blocked reading it wakes at once
/// (launchers like mpirun follow SIGTERM with SIGKILL soon after). Installs
/// the handlers (call it before anything is written) and returns the pipe's
/// read end for [`watch_interrupts`].
pub(super) fn handle_interrupts() -> Option<libc::c_int> {
    let mut fds = [-1 as libc::c_int; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return None;
    }
    // The handler must never block: its end does not wait for room.
    // SAFETY: fcntl on a descriptor this function just made.
    unsafe {
        libc::fcntl(fds[1], libc::F_SETFL, libc::O_NONBLOCK);
    }
    WAKE_FD.store(fds[1], std::sync::atomic::Ordering::SeqCst);
    for sig in CLEANUP_SIGNALS {
        // SAFETY: a zeroed sigaction is valid; the handler only does
        // async-signal-safe work (above).
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
    Some(fds[0])
}

/// The thread that waits on the pipe of [`handle_interrupts`]: cleans up
/// and exits when a signal comes.
pub(super) fn watch_interrupts(wake: Option<libc::c_int>) {
    let Some(fd) = wake else { return };
    std::thread::spawn(move || loop {
        let mut b = 0u8;
        // SAFETY: reads one byte into `b` from the pipe this process made.
        let n = unsafe { libc::read(fd, (&mut b as *mut u8).cast(), 1) };
        if n == 1 {
            nccl_rendezvous::cleanup::run_cleanups();
            let name = match libc::c_int::from(b) {
                libc::SIGINT => "SIGINT",
                libc::SIGTERM => "SIGTERM",
                _ => "SIGHUP",
            };
            // One write: stderr is unbuffered, and a formatted line would go
            // out in pieces, of which a SIGKILL (mpirun's follows its SIGTERM
            // within a millisecond) could leave half.
            let line = format!(
                "nccl-find smoke: interrupted ({name}); the files this run wrote were removed\n"
            );
            let _ = std::io::stderr().write_all(line.as_bytes());
            std::process::exit(128 + i32::from(b));
        }
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        return;
    });
}
