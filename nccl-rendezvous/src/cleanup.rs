//! What to undo when the process is interrupted: files a run wrote. The
//! command's signal handler runs [`run_cleanups`] before it exits.

type Cleanup = Box<dyn Fn() + Send>;
static CLEANUPS: std::sync::Mutex<Vec<(u64, Cleanup)>> = std::sync::Mutex::new(Vec::new());
static NEXT_CLEANUP: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Registers something to undo if the process is interrupted (files this
/// run wrote); returns a key for [`forget_cleanup`].
pub fn on_interrupt(f: impl Fn() + Send + 'static) -> u64 {
    let key = NEXT_CLEANUP.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    CLEANUPS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((key, Box::new(f)));
    key
}

/// Drops a registered cleanup (the run cleaned up by itself).
pub fn forget_cleanup(key: u64) {
    CLEANUPS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|(k, _)| *k != key);
}

/// Runs every registered cleanup: call it from an interrupt handler's
/// thread before exiting.
pub fn run_cleanups() {
    let list = std::mem::take(&mut *CLEANUPS.lock().unwrap_or_else(|e| e.into_inner()));
    for (_, f) in list {
        f();
    }
}
