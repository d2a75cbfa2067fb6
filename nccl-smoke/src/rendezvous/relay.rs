//! One connection to torchrun's agent store per node, not one per process.
//!
//! torch's TCPStore server looks up the name of each client's address (a
//! reverse DNS query) on its one event-loop thread as it accepts the
//! connection. Where the resolver is slow, or drops queries under load,
//! each costs up to 5 s, one after another: 1024 workers took 104 s to
//! meet on one machine whose resolver dropped about one query in fifty. So
//! on a node with several workers (torchrun's `LOCAL_WORLD_SIZE`), local
//! rank 0 holds the node's only connection to the store and serves the
//! node's other processes.
//!
//! They reach it through a Unix socket in Linux's abstract namespace:
//! nothing on disk to clean up, gone when its process is. Its name comes
//! from the user id, the store's address, our keys' prefix (run id and
//! restart) and the node's rank (`GROUP_RANK`), so two jobs, two restarts
//! or two nodes emulated on one host never share one. Each side checks that
//! the other runs as the same user; anything else is closed unread.
//!
//! A client's frame: an op (u8), a length (u32, little-endian) and that
//! many bytes (at most [`MAX_FRAME`]). Every frame gets one reply: a status
//! (0 ok, 1 failed), a length and the bytes (a value, or a failure). The
//! relay keeps each local rank's puts and gets as they are, and turns a
//! barrier of the node into one barrier in the store for all of them
//! ([`Hub::arrive`], [`Hub::pass`]): the store still sees an arrival key for
//! every rank, so a rank that never came is named whichever node it is on.
//!
//! Local rank 0 holds one descriptor per local process (1024 workers on a
//! node: as many sockets). It raises its soft `ulimit -n` to the hard one
//! where that is needed, and where even that is too low, or it runs out
//! later, every local process is told so, with what to do.

use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::kv::Kv;
use super::{fail, Failed};

/// What the relay does with the store for the node: [`super::tcpstore::StoreKv`]
/// in use, an in-memory one in tests.
pub(super) trait Hub: Send {
    /// Publishes `value` under `key`.
    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), String>;
    /// Reads `key` as rank `from` put it.
    fn get(&mut self, from: usize, key: &str) -> Result<Vec<u8>, String>;
    /// Says in the store that `rank` has reached barrier `n`.
    fn arrive(&mut self, n: u64, rank: usize) -> Result<(), Failed>;
    /// Every one of the node's `count` ranks has arrived at barrier `n`:
    /// returns once every rank of the job has, by `deadline`.
    fn pass(&mut self, n: u64, count: usize, deadline: Instant) -> Result<(), Failed>;
    /// Barrier `n` timed out on this node: who never came (asked of the store).
    fn never_came(&mut self, n: u64) -> Failed;
    /// Leaves the store.
    fn close(&mut self);
}

/// The longest frame either side takes: a key (8 KiB) and a value (64
/// KiB), with room to spare.
const MAX_FRAME: usize = 128 * 1024;

/// The most connections past the node's own processes the relay lets wait
/// for their hello at once (strangers, or the node's processes that have
/// not said hello yet: the node's own processes have a slot each besides);
/// more are closed at once, and the node's processes try again.
const MAX_STRANGERS: usize = 64;

/// How long a connection may take to say hello (a local rank says it as it
/// connects); one that does not is closed, and its slot freed.
const HELLO_WAIT: Duration = Duration::from_secs(5);

const HELLO: u8 = 1;
const PUT: u8 = 2;
const GET: u8 = 3;
const FENCE: u8 = 4;

/// Where one node's relay listens, and who belongs to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Node {
    /// The socket's abstract name (without the leading NUL).
    pub(super) name: String,
    /// The node's processes (`LOCAL_WORLD_SIZE`).
    pub(super) size: usize,
    /// This process's place among them (`LOCAL_RANK`); 0 relays.
    pub(super) local_rank: usize,
}

impl Node {
    /// The relay of the job whose store is `store` (`host:port`), whose
    /// keys are under `prefix`, on the node `group`.
    pub(super) fn new(
        store: &str,
        prefix: &str,
        group: usize,
        size: usize,
        local_rank: usize,
    ) -> Node {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let uid = unsafe { libc::geteuid() };
        let key = format!("{store}\0{prefix}\0{group}");
        Node {
            name: format!(
                "nccl-find/relay/{uid}/{}",
                nccl_find::internal::fnv1a_hex(key.as_bytes())
            ),
            size,
            local_rank,
        }
    }

    fn addr(&self) -> io::Result<SocketAddr> {
        SocketAddr::from_abstract_name(self.name.as_bytes())
    }

    /// In words, for the report.
    pub(super) fn describe(&self) -> String {
        format!(
            "one connection per node: local rank 0 relays for the node's {} processes through @{}",
            self.size, self.name
        )
    }
}

/// Who a connected Unix socket's peer is: its process and user.
fn peer_cred(s: &UnixStream) -> io::Result<libc::ucred> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: the descriptor is a live socket owned by `s`; `cred` and `len`
    // are valid for writes of a `ucred` and outlive the call.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred)
}

/// This process's user.
fn me() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

fn same_user(s: &UnixStream) -> bool {
    peer_cred(s).is_ok_and(|c| c.uid == me())
}

/// Why local rank 0 cannot listen at `name`, which `holder` holds (as
/// connecting to it tells), with what to do.
fn held(name: &str, holder: io::Result<libc::ucred>) -> String {
    match holder {
        Ok(c) if c.uid != me() => format!(
            "a process of another user (uid {}, pid {}) holds this node's relay name @{name}: not ours. \
             Set NCCL_FIND_STORE_RELAY=0 (every worker its own client of the store), or pass --init \
             tcp://HOST:PORT",
            c.uid, c.pid
        ),
        Ok(c) => format!(
            "another process of this user (pid {}) already relays for this node at @{name} (a second \
             job with the same run id, store and node rank?). Give each job its own --rdzv-id, pass \
             --init tcp://HOST:PORT, or set NCCL_FIND_STORE_RELAY=0",
            c.pid
        ),
        Err(e) => format!(
            "another process holds this node's relay name @{name} and does not answer ({e}): a second \
             job with the same run id, store and node rank? Give each job its own --rdzv-id, pass \
             --init tcp://HOST:PORT, or set NCCL_FIND_STORE_RELAY=0"
        ),
    }
}

/// The relay's process, where the one listening at `name` (`cred`) runs
/// as this user; why it is not our relay otherwise.
fn ours(name: &str, cred: io::Result<libc::ucred>) -> Result<i32, String> {
    match cred {
        Ok(c) if c.uid == me() => Ok(c.pid),
        Ok(c) => Err(format!(
            "the process listening at @{name} (pid {}) runs as another user (uid {}): not our relay. Set \
             NCCL_FIND_STORE_RELAY=0 (every worker its own client of the store), or pass --init \
             tcp://HOST:PORT",
            c.pid, c.uid
        )),
        Err(e) => Err(format!(
            "cannot tell who listens at @{name} ({e}): not our relay? Set NCCL_FIND_STORE_RELAY=0 \
             (every worker its own client of the store)"
        )),
    }
}

fn write_frame(s: &mut impl Write, tag: u8, body: &[u8]) -> io::Result<()> {
    let mut b = Vec::with_capacity(5 + body.len());
    b.push(tag);
    b.extend_from_slice(&(body.len() as u32).to_le_bytes());
    b.extend_from_slice(body);
    s.write_all(&b)
}

/// One frame, its length bounded by `most` of its tag.
fn read_frame(s: &mut impl Read, most: impl Fn(u8) -> usize) -> io::Result<(u8, Vec<u8>)> {
    let mut head = [0u8; 5];
    s.read_exact(&mut head)?;
    let n = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
    let most = most(head[0]);
    if n > most {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a frame of {n} bytes; at most {most} are taken"),
        ));
    }
    let mut body = vec![0u8; n];
    s.read_exact(&mut body)?;
    Ok((head[0], body))
}

fn put_str(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s);
}

/// Reads what [`put_str`] wrote, from `at`.
fn take_str<'a>(b: &'a [u8], at: &mut usize) -> Option<&'a [u8]> {
    let n = u32::from_le_bytes(b.get(*at..*at + 4)?.try_into().ok()?) as usize;
    let s = b.get(*at + 4..(*at + 4).checked_add(n)?)?;
    *at += 4 + n;
    Some(s)
}

fn take_u64(b: &[u8], at: &mut usize) -> Option<u64> {
    let v = u64::from_le_bytes(b.get(*at..*at + 8)?.try_into().ok()?);
    *at += 8;
    Some(v)
}

/// The most characters of a failure's message the relay sends (a message
/// naming every rank of a large job is longer), and a local rank shows.
const MAX_FAILURE_TEXT: usize = 4000;

/// The longest failure a relay sends for a job of `world` ranks: the runs
/// of missing ranks (at most one per two ranks) and the message, cut.
fn failure_bound(world: usize) -> usize {
    let runs = 8usize.saturating_add(world.saturating_add(1).saturating_mul(8));
    let text = 4 * MAX_FAILURE_TEXT + 64;
    runs.saturating_add(text).max(MAX_FRAME)
}

/// A failure as a reply: the runs of missing ranks (the first and how
/// many), then the message, cut to [`MAX_FAILURE_TEXT`] characters.
fn encode_failed(f: &Failed) -> Vec<u8> {
    let runs = runs(&f.missing);
    let text = clip(&f.message, MAX_FAILURE_TEXT);
    let mut b = Vec::with_capacity(8 + 16 * runs.len() + text.len());
    b.extend_from_slice(&(runs.len() as u64).to_le_bytes());
    for (first, n) in runs {
        b.extend_from_slice(&(first as u64).to_le_bytes());
        b.extend_from_slice(&(n as u64).to_le_bytes());
    }
    b.extend_from_slice(text.as_bytes());
    b
}

/// `ranks` sorted, as runs of consecutive ones: (first, how many).
fn runs(ranks: &[usize]) -> Vec<(usize, usize)> {
    let mut sorted = ranks.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out: Vec<(usize, usize)> = Vec::new();
    for r in sorted {
        match out.last_mut() {
            Some((first, n)) if *first + *n == r => *n += 1,
            _ => out.push((r, 1)),
        }
    }
    out
}

/// `text`'s first `max` characters, and how many bytes were left out.
fn clip(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}... ({} more bytes)", &text[..at], text.len() - at).into(),
        None => text.into(),
    }
}

fn decode_failed(b: &[u8], world: usize) -> Failed {
    let mut at = 0;
    let bad = || fail("the node's relay sent a failure this process cannot read");
    let Some(runs) = take_u64(b, &mut at).filter(|n| *n <= world as u64) else {
        return bad();
    };
    let mut missing: Vec<usize> = Vec::new();
    for _ in 0..runs {
        let (Some(first), Some(n)) = (take_u64(b, &mut at), take_u64(b, &mut at)) else {
            return bad();
        };
        // In order, apart, within the job: at most `world` ranks in all.
        let from = missing.last().map_or(0, |l| *l as u64 + 1);
        let end = first.checked_add(n).filter(|e| *e <= world as u64);
        let (Some(end), true) = (end, first >= from && n > 0) else {
            return bad();
        };
        missing.extend(first as usize..end as usize);
    }
    let text = String::from_utf8_lossy(&b[at..]);
    let message = crate::untrusted::shown(&text, MAX_FAILURE_TEXT + 40);
    Failed { message, missing }
}

enum Event {
    Opened(Result<Box<dyn Hub>, String>),
    Joined(usize, Peer),
    Frame(usize, u8, Vec<u8>),
    Gone(usize),
}

/// Starts local rank 0's relay: binds the node's socket now (so that the
/// others can connect), and serves it on a thread of its own, reaching the
/// store through `open` there.
pub(super) fn serve<F>(node: &Node, own: usize, world: usize, open: F) -> Result<(), String>
where
    F: FnOnce() -> Result<Box<dyn Hub>, String> + Send + 'static,
{
    let addr = node
        .addr()
        .map_err(|e| format!("cannot name the node's relay socket @{}: {e}", node.name))?;
    let room = room_for(node.size);
    let listener = UnixListener::bind_addr(&addr).map_err(|e| match e.kind() {
        io::ErrorKind::AddrInUse => {
            let holder = UnixStream::connect_addr(&addr).and_then(|s| peer_cred(&s));
            held(&node.name, holder)
        }
        _ => format!("cannot listen at @{}: {e}", node.name),
    })?;
    let (tx, rx) = mpsc::sync_channel::<Event>(EVENTS);
    let shared = Arc::new(Shared::default());
    let (size, name) = (node.size, node.name.clone());
    // One descriptor held back from the start, for when there are none.
    let spare = std::fs::File::open("/dev/null").ok();
    spawn("nccl-find-relay-accept", 256, {
        let (shared, tx) = (shared.clone(), tx.clone());
        move || accept_loop(listener, spare, tx, shared, size)
    })?;
    // The store is opened on a thread of its own, so that the node's
    // processes are answered hello meanwhile.
    spawn("nccl-find-relay-open", 2048, move || {
        // Too few descriptors: every local rank is told so.
        let _ = tx.send(Event::Opened(room.and_then(|()| open())));
    })?;
    spawn("nccl-find-relay", 2048, move || {
        let mut r = Relay::new(Err(String::new()), world, size, own, shared);
        r.pending = Some(std::collections::VecDeque::new());
        r.run(&rx, &name);
    })
}

/// Descriptors local rank 0 keeps free past one per local process: for the
/// store's connection, a fresh one to ask who never came, strangers, and
/// the rest of the process (NCCL's sockets).
const FD_SLACK: u64 = 64;

/// This process's limit on open descriptors: (soft, hard).
// `rlim_t` is not `u64` on every target.
#[allow(clippy::unnecessary_cast)]
fn fd_limit() -> (u64, u64) {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes into `l`, which is valid and ours.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } != 0 {
        return (u64::MAX, u64::MAX);
    }
    (l.rlim_cur as u64, l.rlim_max as u64)
}

/// Sets this process's soft limit on open descriptors: whether it took.
fn set_fd_soft_limit(soft: u64, hard: u64) -> bool {
    let l = libc::rlimit {
        rlim_cur: soft as libc::rlim_t,
        rlim_max: hard as libc::rlim_t,
    };
    // SAFETY: setrlimit only reads `l`, which is valid for the call.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &l) == 0 }
}

/// How many descriptors this process has open (none known without /proc).
fn fds_open() -> u64 {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64)
}

/// Room for a relay of `size` processes (one descriptor each): the soft
/// limit raised to the hard one where it is too low, or why there is none.
fn room_for(size: usize) -> Result<(), String> {
    let open = fds_open();
    let need = open + size as u64 + FD_SLACK;
    let (soft, hard) = fd_limit();
    if soft >= need || (hard >= need && set_fd_soft_limit(hard, hard)) {
        return Ok(());
    }
    Err(format!(
        "local rank 0 may have {soft} file descriptors open (ulimit -n; the hard limit is {hard}), \
         {open} already: too few to relay for LOCAL_WORLD_SIZE={size}, one per process. Raise ulimit -n \
         to {need} or more, or set NCCL_FIND_STORE_RELAY=0"
    ))
}

/// Whether `e` says that this process, or the system, is out of descriptors.
fn out_of_fds(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE))
}

/// The node's failure once local rank 0 ran out of descriptors.
fn no_fds(size: usize) -> String {
    format!(
        "local rank 0 ran out of file descriptors (ulimit -n {}) relaying for LOCAL_WORLD_SIZE={size}: \
         raise ulimit -n, or set NCCL_FIND_STORE_RELAY=0",
        fd_limit().0
    )
}

/// How long the accepting thread waits before it tries again, out of
/// descriptors with none held back.
const FD_BACKOFF: Duration = Duration::from_millis(50);

/// A thread of `stack` KiB (a reader needs little; one per local process).
fn spawn(name: &str, stack: usize, f: impl FnOnce() + Send + 'static) -> Result<(), String> {
    std::thread::Builder::new()
        .name(name.into())
        .stack_size(stack.saturating_mul(1024))
        .spawn(f)
        .map(|_| ())
        .map_err(|e| format!("cannot start a thread: {e}"))
}

/// Out of descriptors: frees the one held back to take the connection
/// waiting, tells it `why` and closes it (so that it does not wait for an
/// answer until its deadline), and holds one back again. False where none
/// was held (another thread took it): then only time helps.
fn turn_away(listener: &UnixListener, spare: &mut Option<std::fs::File>, why: &str) -> bool {
    let held = spare.take().is_some();
    if held {
        if let Ok((s, _)) = listener.accept() {
            if same_user(&s) {
                let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
                let _ = write_frame(&mut &s, 1, &encode_failed(&fail(why)));
                // Its hello read, so that closing does not reset the reply.
                let _ = s.set_nonblocking(true);
                let _ = (&s).read(&mut [0u8; 64]);
            }
        }
    }
    *spare = std::fs::File::open("/dev/null").ok();
    held
}

/// What the accepting thread, the readers and the relay share.
#[derive(Default)]
struct Shared {
    /// Set once the relay is done: the accepting thread stops.
    done: AtomicBool,
    /// Set once the accepting thread ran out of descriptors.
    ran_out: AtomicBool,
    /// Connections waiting for their hello to be taken.
    waiting: AtomicUsize,
    /// The node's processes whose hello was taken, ever.
    joined: AtomicUsize,
}

impl Shared {
    /// Whether another connection may wait for its hello: one slot for
    /// each of the node's `size` processes yet to say it, and
    /// [`MAX_STRANGERS`].
    fn room(&self, size: usize) -> bool {
        let owed = size.saturating_sub(self.joined.load(Ordering::SeqCst));
        self.waiting.load(Ordering::SeqCst) < owed + MAX_STRANGERS
    }
}

/// A connection's slot while it waits for its hello to be taken: given
/// back when dropped, whatever becomes of the connection (its reader
/// never started, stopped, or it said hello).
struct Waiting(Arc<Shared>);

impl Waiting {
    fn new(shared: &Arc<Shared>) -> Waiting {
        shared.waiting.fetch_add(1, Ordering::SeqCst);
        Waiting(shared.clone())
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Takes connections until the relay is done: one reader thread each;
/// another user's, or one past those that may wait for their hello
/// ([`Shared::room`]), closed at once. Out of descriptors, it says so to
/// the connection ([`turn_away`], with the `spare` one held back) and,
/// through `ran_out`, in the node's failure.
fn accept_loop(
    listener: UnixListener,
    mut spare: Option<std::fs::File>,
    tx: mpsc::SyncSender<Event>,
    shared: Arc<Shared>,
    size: usize,
) {
    let mut next = 0usize;
    // Checked before each accept too: the relay's last connection, which
    // wakes this thread, may be the one turned away.
    while !shared.done.load(Ordering::SeqCst) {
        let s = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if out_of_fds(&e) => {
                shared.ran_out.store(true, Ordering::SeqCst);
                if !turn_away(&listener, &mut spare, &no_fds(size)) {
                    std::thread::sleep(FD_BACKOFF);
                }
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => continue,
            Err(_) => {
                std::thread::sleep(FD_BACKOFF);
                continue;
            }
        };
        if shared.done.load(Ordering::SeqCst) {
            return;
        }
        if !same_user(&s) || !shared.room(size) {
            let _ = s.shutdown(std::net::Shutdown::Both);
            continue;
        }
        if !admit(next, s, &tx, &shared) {
            return;
        }
        next += 1;
    }
}

/// Hands connection `id` to the relay, waiting for its hello, and starts
/// its reader: false once the relay is gone.
fn admit(id: usize, s: UnixStream, tx: &mpsc::SyncSender<Event>, shared: &Arc<Shared>) -> bool {
    let waiting = Waiting::new(shared);
    // One descriptor per connection: the reader and the relay share it.
    let s = Arc::new(s);
    let (turn, turned) = mpsc::sync_channel(1);
    let peer = Peer {
        w: s.clone(),
        rank: None,
        turn,
    };
    if tx.send(Event::Joined(id, peer)).is_err() {
        return false;
    }
    start_reader(id, s, tx, turned, waiting, 128);
    true
}

/// Starts connection `id`'s reader on a thread of `stack` KiB; false where
/// none could be had: the connection is then gone, and its slot free.
fn start_reader(
    id: usize,
    s: Arc<UnixStream>,
    tx: &mpsc::SyncSender<Event>,
    turned: mpsc::Receiver<bool>,
    waiting: Waiting,
    stack: usize,
) -> bool {
    let tx2 = tx.clone();
    let reader = move || {
        read_loop(id, &s, &tx2, &turned, waiting);
        // Read no more: its process sees it closed.
        let _ = s.shutdown(std::net::Shutdown::Both);
        let _ = tx2.send(Event::Gone(id));
    };
    let started = spawn("nccl-find-relay-read", stack, reader).is_ok();
    if !started {
        let _ = tx.send(Event::Gone(id));
    }
    started
}

/// The most events waiting for the relay's thread: a connection has at
/// most one frame in flight, so readers wait here only for their turn.
const EVENTS: usize = 64;

/// The longest hello (a rank and a world size).
const HELLO_LEN: usize = 16;

/// Forwards connection `id`'s frames to the relay one at a time: the next
/// is read only once the relay answered this one (`turned` says whether
/// the connection is now a local rank's). A process that sends ahead waits,
/// its bytes in its socket's buffer, never in the relay's memory. Before
/// its hello is taken, only a hello is read, within [`HELLO_WAIT`], and the
/// connection holds a `waiting` slot.
fn read_loop(
    id: usize,
    s: &UnixStream,
    tx: &mpsc::SyncSender<Event>,
    turned: &mpsc::Receiver<bool>,
    waiting: Waiting,
) {
    let mut waiting = Some(waiting);
    let _ = s.set_read_timeout(Some(HELLO_WAIT));
    loop {
        let member = waiting.is_none();
        let most = if member { MAX_FRAME } else { HELLO_LEN };
        let Ok((op, body)) = read_frame(&mut &*s, |_| most) else {
            return;
        };
        if !member && op != HELLO {
            return;
        }
        if tx.send(Event::Frame(id, op, body)).is_err() {
            return;
        }
        match turned.recv() {
            Ok(true) if !member => {
                // A local rank: it may stay quiet as long as it likes.
                waiting = None;
                let _ = s.set_read_timeout(None);
            }
            Ok(_) => {}
            Err(_) => return,
        }
    }
}

/// One connection: its writing half, once it said hello its rank, and
/// how its reader learns that its frame was answered.
struct Peer {
    w: Arc<UnixStream>,
    rank: Option<usize>,
    turn: mpsc::SyncSender<bool>,
}

/// The most bytes of values the relay keeps (each counted with its key
/// and 64 more): the plan every local rank reads, and what came last.
const CACHE_BYTES: usize = 1024 * 1024;

/// Values read from the store, by key (a key is written once, by one rank:
/// who asks does not change it); the oldest dropped past [`CACHE_BYTES`].
#[derive(Default)]
struct Cache {
    values: std::collections::HashMap<String, Vec<u8>>,
    order: std::collections::VecDeque<String>,
    bytes: usize,
}

impl Cache {
    fn cost(key: &str, value: &[u8]) -> usize {
        key.len() + value.len() + 64
    }

    fn get(&self, key: &str) -> Option<&Vec<u8>> {
        self.values.get(key)
    }

    fn keep(&mut self, key: String, value: Vec<u8>) {
        let cost = Cache::cost(&key, &value);
        if cost > CACHE_BYTES || self.values.contains_key(&key) {
            return;
        }
        while self.bytes + cost > CACHE_BYTES {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(v) = self.values.remove(&old) {
                self.bytes -= Cache::cost(&old, &v);
            }
        }
        self.bytes += cost;
        self.order.push_back(key.clone());
        self.values.insert(key, value);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.values.len()
    }

    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.bytes
    }
}

/// The relay's state, on its own thread.
struct Relay {
    hub: Result<Box<dyn Hub>, String>,
    world: usize,
    size: usize,
    /// The rank of the process the relay runs in.
    own: usize,
    shared: Arc<Shared>,
    /// The connections open now, by id.
    peers: std::collections::HashMap<usize, Peer>,
    /// Ranks that said hello, and have not left.
    members: usize,
    /// Ranks that said hello, ever.
    joined: usize,
    /// Ranks that said hello, and left.
    gone: Vec<usize>,
    /// Values read from the store: every key is written once.
    cache: Cache,
    /// The barrier the node is at.
    fence: u64,
    /// Who has arrived at it (connection, rank), and the earliest deadline.
    arrived: Vec<(usize, usize)>,
    until: Option<Instant>,
    /// Once a barrier failed, every later request gets this.
    broken: Option<Failed>,
    /// While the store is being opened: the frames that need it, in order
    /// (one per connection at most).
    pending: Option<std::collections::VecDeque<(usize, u8, Vec<u8>)>>,
}

impl Relay {
    fn new(
        hub: Result<Box<dyn Hub>, String>,
        world: usize,
        size: usize,
        own: usize,
        shared: Arc<Shared>,
    ) -> Relay {
        Relay {
            hub,
            world,
            size,
            own,
            shared,
            peers: std::collections::HashMap::new(),
            members: 0,
            joined: 0,
            gone: Vec::new(),
            cache: Cache::default(),
            fence: 0,
            arrived: Vec::new(),
            until: None,
            broken: None,
            pending: None,
        }
    }

    fn run(&mut self, rx: &mpsc::Receiver<Event>, name: &str) {
        loop {
            let ev = match self.until {
                Some(t) => match rx.recv_timeout(t.saturating_duration_since(Instant::now())) {
                    Ok(ev) => ev,
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        self.timed_out();
                        continue;
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                },
                None => match rx.recv() {
                    Ok(ev) => ev,
                    Err(_) => break,
                },
            };
            match ev {
                Event::Joined(id, peer) => self.joined(id, peer),
                Event::Opened(hub) => self.opened(hub),
                Event::Frame(id, op, body) => self.frame(id, op, &body),
                Event::Gone(id) => {
                    if self.closed(id) {
                        break;
                    }
                }
            }
        }
        if let Ok(h) = self.hub.as_mut() {
            h.close();
        }
        // Wake the accepting thread so that it drops the socket.
        self.shared.done.store(true, Ordering::SeqCst);
        if let Ok(a) = SocketAddr::from_abstract_name(name.as_bytes()) {
            let _ = UnixStream::connect_addr(&a);
        }
    }

    fn joined(&mut self, id: usize, peer: Peer) {
        self.peers.insert(id, peer);
    }

    fn reply(&mut self, id: usize, r: Result<Vec<u8>, Failed>) {
        let Some(p) = self.peers.get_mut(&id) else {
            return;
        };
        let _ = p.w.set_write_timeout(Some(Duration::from_secs(10)));
        let ok = match &r {
            Ok(v) => write_frame(&mut &*p.w, 0, v),
            Err(f) => write_frame(&mut &*p.w, 1, &encode_failed(f)),
        };
        match ok {
            // Its reader may read the next frame.
            Ok(()) => drop(p.turn.try_send(p.rank.is_some())),
            Err(_) => self.drop_peer(id),
        }
    }

    /// Closes connection `id`; where it was a local rank's, that rank left.
    fn drop_peer(&mut self, id: usize) {
        let Some(p) = self.peers.remove(&id) else {
            return;
        };
        let _ = p.w.shutdown(std::net::Shutdown::Both);
        if let Some(rank) = p.rank {
            self.members -= 1;
            self.left(rank);
        }
    }

    /// Local rank `rank` left: the barrier the others wait at, or the next
    /// one they come to, fails naming it (unless it had arrived there).
    fn left(&mut self, rank: usize) {
        if !self.gone.contains(&rank) {
            self.gone.push(rank);
        }
        if !self.arrived.is_empty() {
            self.fail_if_gone();
        }
    }

    /// Settles the barrier as failed where a local rank left before it.
    fn fail_if_gone(&mut self) {
        let arrived = &self.arrived;
        let Some(&rank) = self
            .gone
            .iter()
            .find(|r| !arrived.iter().any(|a| a.1 == **r))
        else {
            return;
        };
        let f = Failed {
            message: format!(
                "rank {rank} left before barrier {} (it failed?): check its output",
                self.fence
            ),
            missing: vec![rank],
        };
        self.settle(Err(f));
    }

    fn hub(&mut self) -> Result<&mut Box<dyn Hub>, Failed> {
        if let Some(f) = &self.broken {
            return Err(f.clone());
        }
        self.hub.as_mut().map_err(|e| fail(e.clone()))
    }

    /// The store is open (or could not be): the frames that waited for it
    /// are taken.
    fn opened(&mut self, hub: Result<Box<dyn Hub>, String>) {
        self.hub = hub;
        for (id, op, body) in self.pending.take().unwrap_or_default() {
            self.frame(id, op, &body);
        }
    }

    fn frame(&mut self, id: usize, op: u8, body: &[u8]) {
        let Some(rank) = self.peers.get(&id).map(|p| p.rank) else {
            return;
        };
        if let (Some(q), true) = (self.pending.as_mut(), op != HELLO) {
            return q.push_back((id, op, body.to_vec()));
        }
        match (op, rank) {
            (HELLO, None) => {
                let r = self.hello(id, body);
                let refused = r.is_err();
                self.reply(id, r.map(|_| Vec::new()));
                if refused {
                    self.drop_peer(id);
                }
            }
            (PUT, Some(_)) => {
                let mut at = 0;
                let r = match (take_str(body, &mut at), take_str(body, &mut at)) {
                    (Some(k), Some(v)) if at == body.len() => match std::str::from_utf8(k) {
                        Ok(k) => self.hub().and_then(|h| h.put(k, v).map_err(fail)),
                        Err(_) => Err(fail("a key that is not text")),
                    },
                    _ => Err(fail("a malformed put")),
                };
                self.reply(id, r.map(|_| Vec::new()));
            }
            (GET, Some(_)) => {
                let r = self.get(body);
                self.reply(id, r);
            }
            (FENCE, Some(rank)) => self.arrive(id, rank, body),
            // Anything else: a stranger, or a client out of step.
            _ => self.drop_peer(id),
        }
    }

    fn hello(&mut self, id: usize, body: &[u8]) -> Result<(), Failed> {
        let mut at = 0;
        let (Some(rank), Some(world)) = (take_u64(body, &mut at), take_u64(body, &mut at)) else {
            return Err(fail("a malformed hello"));
        };
        if world != self.world as u64 || rank >= world {
            return Err(fail(format!(
                "rank {rank} of {world} said hello to the relay of a job of {} processes",
                self.world
            )));
        }
        let rank = rank as usize;
        if self.joined >= self.size {
            return Err(fail(format!(
                "rank {rank} said hello to a node relay that already has all {} of its processes \
                 (LOCAL_WORLD_SIZE)",
                self.size
            )));
        }
        if self.peers.values().any(|p| p.rank == Some(rank)) {
            return Err(fail(format!(
                "rank {rank} is already at this node's relay (two processes with one rank?)"
            )));
        }
        if let Some(p) = self.peers.get_mut(&id) {
            p.rank = Some(rank);
        }
        self.members += 1;
        self.joined += 1;
        self.shared.joined.store(self.joined, Ordering::SeqCst);
        Ok(())
    }

    fn get(&mut self, body: &[u8]) -> Result<Vec<u8>, Failed> {
        let mut at = 0;
        let (Some(from), Some(key)) = (take_u64(body, &mut at), take_str(body, &mut at)) else {
            return Err(fail("a malformed get"));
        };
        let (from, key) = (from as usize, String::from_utf8_lossy(key).into_owned());
        if let Some(v) = self.cache.get(&key) {
            return Ok(v.clone());
        }
        let v = self.hub()?.get(from, &key).map_err(fail)?;
        self.cache.keep(key, v.clone());
        Ok(v)
    }

    fn arrive(&mut self, id: usize, rank: usize, body: &[u8]) {
        let mut at = 0;
        let (Some(n), Some(ms)) = (take_u64(body, &mut at), take_u64(body, &mut at)) else {
            return self.reply(id, Err(fail("a malformed barrier")));
        };
        // A barrier failed before this rank came: it gets that failure.
        if let Some(f) = self.broken.clone() {
            return self.reply(id, Err(f));
        }
        if n != self.fence || self.arrived.iter().any(|a| a.1 == rank) {
            let f = fail(format!(
                "rank {rank} reached barrier {n} while the node is at barrier {}",
                self.fence
            ));
            return self.reply(id, Err(f));
        }
        let fence = self.fence;
        if let Err(f) = self.hub().and_then(|h| h.arrive(fence, rank)) {
            return self.reply(id, Err(f));
        }
        let by = Instant::now() + Duration::from_millis(ms.min(u64::from(u32::MAX)));
        self.until = Some(self.until.map_or(by, |t| t.min(by)));
        self.arrived.push((id, rank));
        self.fail_if_gone();
        if !self.arrived.is_empty() && self.arrived.len() == self.size {
            let (until, size) = (self.until.unwrap_or(by), self.size);
            let r = self.hub().and_then(|h| h.pass(fence, size, until));
            self.settle(r);
        }
    }

    /// Barrier over (or failed): every rank that arrived gets `r`, this
    /// process's own rank last (its process may leave once it has it).
    fn settle(&mut self, r: Result<(), Failed>) {
        if let Err(f) = &r {
            self.broken = Some(f.clone());
        }
        let mut arrived = std::mem::take(&mut self.arrived);
        if let Some(i) = arrived.iter().position(|a| a.1 == self.own) {
            let mine = arrived.remove(i);
            arrived.push(mine);
        }
        for (id, _) in arrived {
            self.reply(id, r.clone().map(|_| Vec::new()));
        }
        self.until = None;
        self.fence += 1;
    }

    fn timed_out(&mut self) {
        let fence = self.fence;
        let mut f = match self.hub() {
            Ok(h) => h.never_came(fence),
            Err(f) => f,
        };
        if self.joined < self.size {
            f.message = format!("{}; {}", self.too_few(), f.message);
        }
        if self.shared.ran_out.load(Ordering::SeqCst) {
            f.message = format!("{}; {}", no_fds(self.size), f.message);
        }
        self.settle(Err(f));
    }

    /// Why a barrier may time out with every rank the store expects there:
    /// fewer processes came to the node than `LOCAL_WORLD_SIZE` says.
    fn too_few(&self) -> String {
        let mut came = self.gone.clone();
        came.extend(self.peers.values().filter_map(|p| p.rank));
        format!(
            "only {} of LOCAL_WORLD_SIZE={} processes came to this node's relay (ranks {}): one never \
             started, or fewer run on this node than torchrun says (check --nproc-per-node)",
            self.joined,
            self.size,
            super::list(&came)
        )
    }

    /// A connection closed: true once every local rank has come and left
    /// (until then, one may still come).
    fn closed(&mut self, id: usize) -> bool {
        self.drop_peer(id);
        self.joined == self.size && self.members == 0
    }
}

/// How long past a barrier's deadline a client waits for the relay's word
/// (it asks the store who never came, in at most a few seconds).
const RELAY_GRACE: Duration = Duration::from_secs(10);

/// The least time a put or get through the relay has.
const OP_FLOOR: Duration = Duration::from_secs(20);

/// One local rank's [`Kv`]: every call goes to the node's relay.
pub(super) struct RelayKv {
    s: UnixStream,
    name: String,
    /// The relay's process.
    pid: i32,
    world: usize,
    fences: u64,
    until: Instant,
}

/// Whether `e` says the other end closed the connection.
fn closed(e: &io::Error) -> bool {
    use io::ErrorKind::*;
    matches!(
        e.kind(),
        UnexpectedEof | ConnectionReset | BrokenPipe | ConnectionAborted
    )
}

/// A connection to `node`'s relay, as soon as it listens (by `deadline`;
/// `started` is when this process began to try).
fn reach(node: &Node, deadline: Instant, started: Instant) -> Result<(UnixStream, i32), String> {
    let addr = node
        .addr()
        .map_err(|e| format!("cannot name the node's relay socket @{}: {e}", node.name))?;
    let mut wait = Duration::from_millis(5);
    let s = loop {
        match UnixStream::connect_addr(&addr) {
            Ok(s) => break s,
            Err(_) if Instant::now() < deadline => pause(&mut wait, deadline),
            Err(e) => {
                return Err(format!(
                    "local rank 0 of this node, which relays for the node's processes to the store, \
                     never listened at @{} within {:.0} s ({e}): did it start? Check its output. Where \
                     a node's processes cannot reach one another (separate network namespaces), set \
                     NCCL_FIND_STORE_RELAY=0",
                    node.name,
                    started.elapsed().as_secs_f64()
                ))
            }
        }
    };
    let pid = ours(&node.name, peer_cred(&s))?;
    Ok((s, pid))
}

/// Sleeps `wait` (no later than `deadline`), and doubles it up to 100 ms.
fn pause(wait: &mut Duration, deadline: Instant) {
    std::thread::sleep((*wait).min(deadline.saturating_duration_since(Instant::now())));
    *wait = (*wait * 2).min(Duration::from_millis(100));
}

impl RelayKv {
    /// Connects rank `rank` of `world` to `node`'s relay by `deadline`
    /// (local rank 0 may not be listening yet, or have no room for one
    /// more connection waiting for its hello: it is tried again).
    pub(super) fn connect(
        node: &Node,
        rank: usize,
        world: usize,
        deadline: Instant,
    ) -> Result<RelayKv, String> {
        let started = Instant::now();
        let mut wait = Duration::from_millis(5);
        loop {
            let (s, pid) = reach(node, deadline, started)?;
            let mut kv = RelayKv {
                s,
                name: node.name.clone(),
                pid,
                world,
                fences: 0,
                until: deadline,
            };
            // A relay answers at once: one that does not is not ours.
            match kv.hello(rank, deadline, started)? {
                true => return Ok(kv),
                false if Instant::now() < deadline => pause(&mut wait, deadline),
                false => {
                    return Err(format!(
                        "local rank 0's relay at @{} closed this process's connection unanswered again \
                         and again for {:.0} s: more than {MAX_STRANGERS} other connections of this user \
                         that never say hello hold it? Check local rank 0's output, or set \
                         NCCL_FIND_STORE_RELAY=0",
                        node.name,
                        started.elapsed().as_secs_f64()
                    ))
                }
            }
        }
    }

    /// Says hello as rank `rank`, by `until`: true once taken; false where
    /// the relay closed the connection unanswered (it had no room for one
    /// more waiting: try again); why it was refused otherwise (`started`:
    /// when this process began to try; the time it had is named, rounded
    /// up).
    fn hello(&mut self, rank: usize, until: Instant, started: Instant) -> Result<bool, String> {
        let had = until
            .saturating_duration_since(started)
            .as_secs_f64()
            .ceil();
        let mut body = (rank as u64).to_le_bytes().to_vec();
        body.extend_from_slice(&(self.world as u64).to_le_bytes());
        match self.exchange(HELLO, &body, until) {
            Err(e) if closed(&e) => Ok(false),
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                Err(format!(
                    "the process at @{} (pid {}) took no hello within {had:.0} s: another process holds \
                     the name? Check local rank 0's output, or set NCCL_FIND_STORE_RELAY=0",
                    self.name, self.pid,
                ))
            }
            r => self.answer(r).map(|_| true).map_err(|f| f.message),
        }
    }

    fn call(&mut self, op: u8, body: &[u8], until: Instant) -> Result<Vec<u8>, Failed> {
        let r = self.exchange(op, body, until);
        self.answer(r)
    }

    /// Sends one frame, and reads the relay's answer, by `until`.
    fn exchange(&mut self, op: u8, body: &[u8], until: Instant) -> io::Result<(u8, Vec<u8>)> {
        let t = until
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        self.s.set_write_timeout(Some(t))?;
        self.s.set_read_timeout(Some(t))?;
        write_frame(&mut self.s, op, body)?;
        let world = self.world;
        let most = |status| match status {
            1 => failure_bound(world),
            _ => MAX_FRAME,
        };
        read_frame(&mut self.s, most)
    }

    /// The relay's answer as a value, or a failure.
    fn answer(&self, r: io::Result<(u8, Vec<u8>)>) -> Result<Vec<u8>, Failed> {
        let (name, pid) = (&self.name, self.pid);
        let lost = |e: io::Error| {
            match closed(&e) {
            true => fail(format!(
                "local rank 0 (pid {pid}), which relays for this node's processes at @{name}, went away: \
                 check its output"
            )),
            false => fail(format!(
                "the node's relay (local rank 0, pid {pid}, at @{name}) stopped answering ({e}): it \
                 failed or hangs? Check its output"
            )),
        }
        };
        match r.map_err(lost)? {
            (0, v) => Ok(v),
            (1, v) => Err(decode_failed(&v, self.world)),
            (s, _) => Err(fail(format!("the node's relay answered with status {s}"))),
        }
    }

    fn op_until(&self) -> Instant {
        self.until.max(Instant::now() + OP_FLOOR)
    }
}

impl Kv for RelayKv {
    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), String> {
        let mut body = Vec::new();
        put_str(&mut body, key.as_bytes());
        put_str(&mut body, value);
        let until = self.op_until();
        self.call(PUT, &body, until)
            .map(|_| ())
            .map_err(|f| f.message)
    }

    fn fence(&mut self, deadline: Instant) -> Result<(), Failed> {
        self.until = deadline;
        let ms = deadline
            .saturating_duration_since(Instant::now())
            .as_millis();
        let mut body = self.fences.to_le_bytes().to_vec();
        body.extend_from_slice(&(ms.min(u128::from(u64::MAX)) as u64).to_le_bytes());
        self.fences += 1;
        self.call(FENCE, &body, deadline + RELAY_GRACE).map(|_| ())
    }

    fn get(&mut self, from: usize, key: &str) -> Result<Vec<u8>, String> {
        let mut body = (from as u64).to_le_bytes().to_vec();
        put_str(&mut body, key.as_bytes());
        let until = self.op_until();
        self.call(GET, &body, until).map_err(|f| f.message)
    }

    fn close(&mut self) {
        let _ = self.s.shutdown(std::net::Shutdown::Both);
    }
}

#[cfg(test)]
mod tests {
    use super::super::kv::{join, Connect};
    use super::super::PeerOutcome;
    use super::*;
    use std::sync::{Condvar, Mutex};

    /// An in-memory store for the relays of one job: the hub's test double
    /// (the real one, torch's TCPStore, is tested under torchrun itself).
    #[derive(Debug)]
    struct Store {
        keys: Mutex<Vec<(String, Vec<u8>)>>,
        cv: Condvar,
        world: usize,
        /// How many connections the relays opened.
        opened: AtomicUsize,
    }

    impl Store {
        fn new(world: usize) -> Arc<Store> {
            Arc::new(Store {
                keys: Mutex::default(),
                cv: Condvar::new(),
                world,
                opened: AtomicUsize::new(0),
            })
        }
        fn has(keys: &[(String, Vec<u8>)], k: &str) -> bool {
            keys.iter().any(|e| e.0 == k)
        }
    }

    struct MemHub(Arc<Store>);

    impl Hub for MemHub {
        fn put(&mut self, key: &str, value: &[u8]) -> Result<(), String> {
            self.0.keys.lock().unwrap().push((key.into(), value.into()));
            Ok(())
        }
        fn get(&mut self, _: usize, key: &str) -> Result<Vec<u8>, String> {
            let keys = self.0.keys.lock().unwrap();
            let v = keys.iter().rev().find(|e| e.0 == key);
            v.map(|e| e.1.clone()).ok_or_else(|| format!("no {key}"))
        }
        fn arrive(&mut self, n: u64, rank: usize) -> Result<(), Failed> {
            let k = format!("fence/{n}/{rank}");
            self.0.keys.lock().unwrap().push((k, Vec::new()));
            Ok(())
        }
        fn pass(&mut self, n: u64, count: usize, deadline: Instant) -> Result<(), Failed> {
            let (count_key, open) = (format!("fence/{n}/count"), format!("fence/{n}/open"));
            let mut keys = self.0.keys.lock().unwrap();
            let total = keys.iter().filter(|e| e.0 == count_key).count() + count;
            keys.extend((0..count).map(|_| (count_key.clone(), Vec::new())));
            if total == self.0.world {
                keys.push((open.clone(), Vec::new()));
                self.0.cv.notify_all();
            }
            while !Store::has(&keys, &open) {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    drop(keys);
                    return Err(self.never_came(n));
                }
                keys = self.0.cv.wait_timeout(keys, left).unwrap().0;
            }
            Ok(())
        }
        fn never_came(&mut self, n: u64) -> Failed {
            let keys = self.0.keys.lock().unwrap();
            let missing: Vec<usize> = (0..self.0.world)
                .filter(|r| !Store::has(&keys, &format!("fence/{n}/{r}")))
                .collect();
            Failed {
                message: format!("barrier {n}: missing {missing:?}"),
                missing,
            }
        }
        fn close(&mut self) {}
    }

    /// A connection as the accepting thread hands it over (no reader).
    fn peer(w: UnixStream) -> Peer {
        Peer {
            w: Arc::new(w),
            rank: None,
            turn: mpsc::sync_channel(1).0,
        }
    }

    /// Ranks placed on nodes, each node relayed.
    #[derive(Debug)]
    struct Via {
        store: Arc<Store>,
        nodes: Vec<Node>,
    }

    impl Connect for Via {
        fn connect(
            &self,
            rank: usize,
            world: usize,
            deadline: Instant,
        ) -> Result<Box<dyn Kv>, String> {
            let node = &self.nodes[rank];
            if node.local_rank == 0 {
                let store = self.store.clone();
                serve(node, rank, world, move || {
                    store.opened.fetch_add(1, Ordering::SeqCst);
                    Ok(Box::new(MemHub(store)) as Box<dyn Hub>)
                })?;
            }
            Ok(Box::new(RelayKv::connect(node, rank, world, deadline)?))
        }
        fn describe(&self) -> String {
            "memory".into()
        }
        fn launcher(&self) -> &'static str {
            "test launcher"
        }
    }

    /// A store name no other test (or run) shares.
    fn unique(test: &str) -> String {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        format!("{test}/{}/{t}", std::process::id())
    }

    /// `per_node` ranks on each node, in rank order (as torchrun places
    /// them); `absent` ranks never start.
    fn via(test: &str, per_node: &[usize]) -> Via {
        let world = per_node.iter().sum();
        let store = unique(test);
        let mut nodes = Vec::new();
        for (g, &n) in per_node.iter().enumerate() {
            for l in 0..n {
                nodes.push(Node::new(&store, "/p/", g, n, l));
            }
        }
        Via {
            store: Store::new(world),
            nodes,
        }
    }

    type Got = Result<(usize, usize, Vec<PeerOutcome>), Failed>;

    fn run(via: Arc<Via>, absent: &[usize], secs: u64) -> Vec<Got> {
        let world = via.nodes.len();
        let hs: Vec<_> = (0..world)
            .filter(|r| !absent.contains(r))
            .map(|r| {
                let via: Arc<dyn Connect> = via.clone();
                std::thread::spawn(move || {
                    let id = (r == 0).then_some([9u8; 128]);
                    let j = join(via, r, world, 1, id, Duration::from_secs(secs))?;
                    assert_eq!(j.id, [9u8; 128]);
                    let (nranks, first) = (j.nranks, j.first_rank);
                    let peers = j.finish(true, 0, &format!("rank {r}"), Duration::from_secs(secs));
                    Ok((nranks, first, peers))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    }

    #[test]
    fn each_node_opens_one_connection_and_every_rank_meets() {
        let via = Arc::new(via("meet", &[3, 2]));
        let got = run(via.clone(), &[], 60);
        let places: Vec<(usize, usize)> = got
            .iter()
            .map(|g| {
                let g = g.as_ref().unwrap();
                (g.0, g.1)
            })
            .collect();
        assert_eq!(places, [(5, 0), (5, 1), (5, 2), (5, 3), (5, 4)]);
        let peers = &got[0].as_ref().unwrap().2;
        let want: Vec<PeerOutcome> = (1..5)
            .map(|r| PeerOutcome {
                rank: r,
                done: Some((true, 0, format!("rank {r}"))),
            })
            .collect();
        assert_eq!(peers, &want);
        assert_eq!(via.store.opened.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_node_of_many_processes_meets_through_one_connection() {
        // More than the relay lets wait unintroduced, all at once.
        let n = MAX_STRANGERS * 2 + 1;
        let via = Arc::new(via("many", &[n]));
        let got = run(via.clone(), &[], 120);
        for (r, g) in got.iter().enumerate() {
            let g = g.as_ref().unwrap();
            assert_eq!((g.0, g.1), (n, r));
        }
        assert_eq!(got[0].as_ref().unwrap().2.len(), n - 1);
        assert_eq!(via.store.opened.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_local_rank_that_never_comes_is_named_at_the_deadline() {
        let via = Arc::new(via("absent", &[3]));
        let t = Instant::now();
        let got = run(via, &[2], 2);
        for g in &got {
            let f = g.as_ref().unwrap_err();
            assert_eq!(f.missing, [2], "{f:?}");
            assert_eq!(
                f.message,
                "test launcher: only 2 of LOCAL_WORLD_SIZE=3 processes came to this node's relay \
                 (ranks 0, 1): one never started, or fewer run on this node than torchrun says (check \
                 --nproc-per-node); barrier 0: missing [2]"
            );
        }
        assert!(t.elapsed() < Duration::from_secs(60), "{:?}", t.elapsed());
    }

    /// A connection to `node`'s relay, as anyone of this user could make.
    fn raw(node: &Node) -> UnixStream {
        let s = UnixStream::connect_addr(&node.addr().unwrap()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s
    }

    /// Whether the relay closed `s` (after what it sent, if anything).
    fn closed(s: &mut UnixStream) -> bool {
        let mut b = Vec::new();
        s.read_to_end(&mut b).is_ok()
    }

    #[test]
    fn strangers_are_closed_and_the_node_still_meets() {
        let via = Arc::new(via("strangers", &[2]));
        let node = via.nodes[0].clone();
        let store = via.store.clone();
        serve(&node, 0, 2, move || {
            Ok(Box::new(MemHub(store)) as Box<dyn Hub>)
        })
        .unwrap();
        // A second relay for the same node is refused, naming the first.
        let e = serve(&node, 0, 2, || Err("unused".into())).unwrap_err();
        assert_eq!(
            e,
            format!(
                "another process of this user (pid {}) already relays for this node at @{} (a second \
                 job with the same run id, store and node rank?). Give each job its own --rdzv-id, pass \
                 --init tcp://HOST:PORT, or set NCCL_FIND_STORE_RELAY=0",
                std::process::id(),
                node.name
            )
        );
        // A frame longer than any real one; a put before hello; garbage.
        let mut huge = raw(&node);
        huge.write_all(&[HELLO, 0xff, 0xff, 0xff, 0xff]).unwrap();
        assert!(closed(&mut huge));
        let mut early = raw(&node);
        write_frame(&mut early, PUT, b"k").unwrap();
        assert!(closed(&mut early));
        // A hello from another job's size: refused in words, then closed.
        let mut wrong = raw(&node);
        let mut body = 1u64.to_le_bytes().to_vec();
        body.extend_from_slice(&7u64.to_le_bytes());
        write_frame(&mut wrong, HELLO, &body).unwrap();
        let (status, why) = read_frame(&mut wrong, |_| MAX_FRAME).unwrap();
        assert_eq!(status, 1);
        assert_eq!(
            decode_failed(&why, 2).message,
            "rank 1 of 7 said hello to the relay of a job of 2 processes"
        );
        assert!(closed(&mut wrong));
        // The node's two ranks meet all the same; the same rank twice, or
        // one more than the node has, is refused.
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut kv = RelayKv::connect(&node, 0, 2, deadline).unwrap();
        let twice = RelayKv::connect(&node, 0, 2, deadline).err().unwrap();
        assert_eq!(
            twice,
            "rank 0 is already at this node's relay (two processes with one rank?)"
        );
        let h = std::thread::spawn({
            let node = node.clone();
            move || {
                let mut kv = RelayKv::connect(&node, 1, 2, deadline).unwrap();
                kv.put("nccl-find/hello/1", b"x").unwrap();
                kv.fence(deadline).unwrap();
                kv.get(0, "nccl-find/hello/0").unwrap()
            }
        });
        kv.put("nccl-find/hello/0", b"y").unwrap();
        kv.fence(deadline).unwrap();
        assert_eq!(kv.get(1, "nccl-find/hello/1").unwrap(), b"x");
        assert_eq!(h.join().unwrap(), b"y");
        let more = RelayKv::connect(&node, 1, 2, deadline).err().unwrap();
        assert_eq!(
            more,
            "rank 1 said hello to a node relay that already has all 2 of its processes (LOCAL_WORLD_SIZE)"
        );
    }

    #[test]
    fn a_local_rank_that_leaves_before_a_barrier_is_named() {
        let via = via("leaves", &[3]);
        let node = via.nodes[0].clone();
        let store = via.store.clone();
        serve(&node, 0, 3, move || {
            Ok(Box::new(MemHub(store)) as Box<dyn Hub>)
        })
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut kv = RelayKv::connect(&node, 0, 3, deadline).unwrap();
        let h = std::thread::spawn({
            let node = node.clone();
            move || {
                let mut kv = RelayKv::connect(&node, 1, 3, deadline).unwrap();
                std::thread::sleep(Duration::from_millis(300));
                kv.close();
            }
        });
        let t = Instant::now();
        let f = kv.fence(deadline).unwrap_err();
        h.join().unwrap();
        assert_eq!(
            f,
            Failed {
                message: "rank 1 left before barrier 0 (it failed?): check its output".into(),
                missing: vec![1]
            }
        );
        assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
        // A rank that comes to that barrier later gets the same failure.
        let mut late = RelayKv::connect(&via.nodes[2], 2, 3, deadline).unwrap();
        assert_eq!(late.fence(deadline).unwrap_err(), f);
    }

    #[test]
    fn a_local_rank_that_leaves_before_anyone_arrives_is_named_at_once() {
        let via = via("leftearly", &[4]);
        let store = via.store.clone();
        serve(&via.nodes[0], 0, 4, move || {
            Ok(Box::new(MemHub(store)) as Box<dyn Hub>)
        })
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut kv0 = RelayKv::connect(&via.nodes[0], 0, 4, deadline).unwrap();
        let mut kv1 = RelayKv::connect(&via.nodes[1], 1, 4, deadline).unwrap();
        // Rank 1 crashes; rank 2 sends what no rank sends, and is dropped.
        kv1.close();
        let mut kv2 = RelayKv::connect(&via.nodes[2], 2, 4, deadline).unwrap();
        write_frame(&mut kv2.s, 9, b"").unwrap();
        assert!(closed(&mut kv2.s));
        // Before the deadline (the store's "missing" then), in words.
        let f = kv0.fence(deadline).unwrap_err();
        let left = |r: usize| Failed {
            message: format!("rank {r} left before barrier 0 (it failed?): check its output"),
            missing: vec![r],
        };
        assert!(f == left(1) || f == left(2), "{f:?}");
        let mut kv3 = RelayKv::connect(&via.nodes[3], 3, 4, deadline).unwrap();
        assert_eq!(kv3.fence(deadline).unwrap_err(), f);
    }

    #[test]
    fn the_relay_stays_up_until_every_local_rank_came_and_left() {
        let via = via("stays", &[2]);
        let store = via.store.clone();
        serve(&via.nodes[0], 0, 2, move || {
            Ok(Box::new(MemHub(store)) as Box<dyn Hub>)
        })
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut kv1 = RelayKv::connect(&via.nodes[1], 1, 2, deadline).unwrap();
        kv1.close();
        std::thread::sleep(Duration::from_millis(300));
        // Local rank 0 comes after the only other one left.
        let mut kv0 = RelayKv::connect(&via.nodes[0], 0, 2, deadline).unwrap();
        kv0.close();
        // Both came and left: the relay stops listening (once it has seen
        // the last leave; until then it refuses a third).
        let full = "rank 0 said hello to a node relay that already has all 2 of its processes \
                    (LOCAL_WORLD_SIZE)";
        let e = loop {
            let soon = Instant::now() + Duration::from_secs(1);
            match RelayKv::connect(&via.nodes[0], 0, 2, soon).err().unwrap() {
                e if e == full && Instant::now() < deadline => continue,
                e => break e,
            }
        };
        assert!(
            e.starts_with("local rank 0 of this node, which relays"),
            "{e}"
        );
    }

    #[test]
    fn a_local_world_size_larger_than_the_node_is_named() {
        // Two nodes of two processes, each told it has three.
        let s = unique("lws");
        let nodes: Vec<Node> = (0..4)
            .map(|r| Node::new(&s, "/p/", r / 2, 3, r % 2))
            .collect();
        let store = Store::new(4);
        for (g, n) in nodes.iter().enumerate().filter(|n| n.1.local_rank == 0) {
            let store = store.clone();
            serve(n, g, 4, move || Ok(Box::new(MemHub(store)) as Box<dyn Hub>)).unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        let kvs: Vec<RelayKv> = (0..4)
            .map(|r| RelayKv::connect(&nodes[r], r, 4, deadline).unwrap())
            .collect();
        let soon = Instant::now() + Duration::from_secs(5);
        let hs: Vec<_> = kvs
            .into_iter()
            .map(|mut kv| std::thread::spawn(move || kv.fence(soon).unwrap_err()))
            .collect();
        for (r, h) in hs.into_iter().enumerate() {
            let came = ["0, 1", "2, 3"][r / 2];
            let message = format!(
                "only 2 of LOCAL_WORLD_SIZE=3 processes came to this node's relay (ranks {came}): \
                 one never started, or fewer run on this node than torchrun says (check \
                 --nproc-per-node); barrier 0: missing []"
            );
            let missing = Vec::new();
            assert_eq!(h.join().unwrap(), Failed { message, missing });
        }
    }

    #[test]
    fn a_relay_that_never_listens_is_named_at_the_deadline() {
        let node = Node::new(&unique("nobody"), "/p/", 0, 2, 1);
        let t = Instant::now();
        let e = RelayKv::connect(&node, 1, 2, Instant::now() + Duration::from_millis(500))
            .err()
            .unwrap();
        assert!(
            e.starts_with(&format!(
                "local rank 0 of this node, which relays for the node's processes to the store, never \
                 listened at @{} within 1 s (",
                node.name
            )),
            "{e}"
        );
        assert!(t.elapsed() < Duration::from_secs(30));
    }

    #[test]
    fn a_process_that_holds_the_relay_name_and_never_answers_is_named() {
        #[derive(Debug)]
        struct Client(Node);
        impl Connect for Client {
            fn connect(&self, r: usize, w: usize, d: Instant) -> Result<Box<dyn Kv>, String> {
                Ok(Box::new(RelayKv::connect(&self.0, r, w, d)?))
            }
            fn describe(&self) -> String {
                "memory".into()
            }
            fn launcher(&self) -> &'static str {
                "test launcher"
            }
        }
        let node = Node::new(&unique("squat"), "/p/", 0, 2, 1);
        let squatter = UnixListener::bind_addr(&node.addr().unwrap()).unwrap();
        let f = join(
            Arc::new(Client(node.clone())),
            1,
            2,
            1,
            None,
            Duration::from_secs(1),
        )
        .err()
        .unwrap();
        drop(squatter);
        assert_eq!(
            f.message,
            format!(
                "test launcher: the process at @{} (pid {}) took no hello within 1 s: another process \
                 holds the name? Check local rank 0's output, or set NCCL_FIND_STORE_RELAY=0. Or pass \
                 --rank, --world-size and --init tcp://HOST:PORT to meet without the launcher's server",
                node.name,
                std::process::id()
            )
        );
    }

    #[test]
    fn a_relay_answers_hello_while_it_opens_the_store() {
        let node = Node::new(&unique("opening"), "/p/", 0, 2, 0);
        let (open_gate, gate) = mpsc::channel::<()>();
        let store = Store::new(2);
        serve(&node, 0, 2, move || {
            let _ = gate.recv();
            Ok(Box::new(MemHub(store)) as Box<dyn Hub>)
        })
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        let t = Instant::now();
        let mut kv = RelayKv::connect(&node, 1, 2, deadline).unwrap();
        assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
        // What needs the store waits for it, in order.
        let h = std::thread::spawn(move || {
            kv.put("k", b"v").unwrap();
            kv.get(1, "k").unwrap()
        });
        std::thread::sleep(Duration::from_millis(200));
        drop(open_gate);
        assert_eq!(h.join().unwrap(), b"v");
    }

    /// Another user's process, as a socket's credentials say (no test can
    /// be another user: the words are checked on their own).
    #[test]
    fn another_users_process_at_the_relay_name_is_named_with_what_to_do() {
        let other = libc::ucred {
            pid: 42,
            uid: me().wrapping_add(1),
            gid: 0,
        };
        assert_eq!(
            held("nccl-find/relay/7/x", Ok(other)),
            format!(
                "a process of another user (uid {}, pid 42) holds this node's relay name \
                 @nccl-find/relay/7/x: not ours. Set NCCL_FIND_STORE_RELAY=0 (every worker its own \
                 client of the store), or pass --init tcp://HOST:PORT",
                other.uid
            )
        );
        assert_eq!(
            ours("nccl-find/relay/7/x", Ok(other)),
            Err(format!(
                "the process listening at @nccl-find/relay/7/x (pid 42) runs as another user (uid {}): \
                 not our relay. Set NCCL_FIND_STORE_RELAY=0 (every worker its own client of the store), \
                 or pass --init tcp://HOST:PORT",
                other.uid
            ))
        );
        let mine = libc::ucred { uid: me(), ..other };
        assert_eq!(ours("nccl-find/relay/7/x", Ok(mine)), Ok(42));
        let refused = || Err(io::Error::from_raw_os_error(libc::ECONNREFUSED));
        assert_eq!(
            held("nccl-find/relay/7/x", refused()),
            "another process holds this node's relay name @nccl-find/relay/7/x and does not answer \
             (Connection refused (os error 111)): a second job with the same run id, store and node \
             rank? Give each job its own --rdzv-id, pass --init tcp://HOST:PORT, or set \
             NCCL_FIND_STORE_RELAY=0"
        );
    }

    #[test]
    fn a_relay_that_goes_away_is_named_with_its_process() {
        // A relay that takes the hello, then its process is gone.
        let node = Node::new(&unique("away"), "/p/", 0, 2, 1);
        let l = UnixListener::bind_addr(&node.addr().unwrap()).unwrap();
        let relay = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            read_frame(&mut s, |_| MAX_FRAME).unwrap();
            write_frame(&mut s, 0, b"").unwrap();
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut kv = RelayKv::connect(&node, 1, 2, deadline).unwrap();
        relay.join().unwrap();
        assert_eq!(
            kv.put("k", b"v").unwrap_err(),
            format!(
                "local rank 0 (pid {}), which relays for this node's processes at @{}, went away: check \
                 its output",
                std::process::id(),
                node.name
            )
        );
    }

    #[test]
    fn connections_that_came_and_went_leave_nothing_behind() {
        let hub = Box::new(MemHub(Store::new(4))) as Box<dyn Hub>;
        let mut r = Relay::new(Ok(hub), 4, 2, 0, Arc::default());
        for id in 0..1000 {
            let (a, _b) = UnixStream::pair().unwrap();
            r.joined(id, peer(a));
            r.closed(id);
        }
        assert_eq!(r.peers.len(), 0);
    }

    /// Bytes from a fixed-seed generator: the same every run.
    fn noise(seed: &mut u64, n: usize) -> Vec<u8> {
        (0..n)
            .map(|_| {
                *seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (*seed >> 56) as u8
            })
            .collect()
    }

    /// Whatever a local process sends, the relay answers or drops it, and
    /// never panics; a failure from the relay is read without a panic.
    #[test]
    fn garbage_frames_never_panic_the_relay_or_its_clients() {
        let store = Store::new(4);
        let hub: Box<dyn Hub> = Box::new(MemHub(store));
        let mut r = Relay::new(Ok(hub), 4, 2, 0, Arc::default());
        let mut seed = 7;
        let mut keep = Vec::new();
        for i in 0..4000 {
            let (a, b) = UnixStream::pair().unwrap();
            b.set_nonblocking(true).unwrap();
            let id = i;
            r.joined(id, peer(a));
            keep.push(b);
            let op = [HELLO, PUT, GET, FENCE, 0, 9][i % 6];
            let len = (noise(&mut seed, 1)[0] % 40) as usize;
            let mut body = noise(&mut seed, len);
            if i % 3 == 0 {
                // A plausible hello first, so that the other ops are read too.
                let mut hello = 1u64.to_le_bytes().to_vec();
                hello.extend_from_slice(&4u64.to_le_bytes());
                r.frame(id, HELLO, &hello);
                body.truncate(len / 2);
            }
            r.frame(id, op, &body);
            r.drop_peer(id);
            r.joined = 0;
            let f = decode_failed(&body, 4);
            assert!(f.missing.iter().all(|m| *m < 4));
            let mut at = 0;
            let _ = take_str(&body, &mut at);
            assert!(at <= body.len());
        }
        assert!(r.members == 0, "{}", r.members);
    }

    /// A hub whose every barrier fails, naming `missing`, saying `message`.
    struct Missing {
        missing: Vec<usize>,
        message: String,
    }

    impl Hub for Missing {
        fn put(&mut self, _: &str, _: &[u8]) -> Result<(), String> {
            Ok(())
        }
        fn get(&mut self, _: usize, key: &str) -> Result<Vec<u8>, String> {
            Err(format!("no {key}"))
        }
        fn arrive(&mut self, _: u64, _: usize) -> Result<(), Failed> {
            Ok(())
        }
        fn pass(&mut self, n: u64, _: usize, _: Instant) -> Result<(), Failed> {
            Err(self.never_came(n))
        }
        fn never_came(&mut self, _: u64) -> Failed {
            Failed {
                message: self.message.clone(),
                missing: self.missing.clone(),
            }
        }
        fn close(&mut self) {}
    }

    /// What both processes of a node of `world` get from a barrier that
    /// fails naming `missing`, saying `message`.
    fn failed_through_relay(world: usize, missing: Vec<usize>, message: &str) -> Vec<Failed> {
        let node = Node::new(&unique("missing"), "/p/", 0, 2, 0);
        let hub = Missing {
            missing,
            message: message.into(),
        };
        serve(&node, 0, world, move || Ok(Box::new(hub) as Box<dyn Hub>)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        let h = std::thread::spawn({
            let node = node.clone();
            move || {
                let mut kv = RelayKv::connect(&node, 1, world, deadline).unwrap();
                kv.fence(deadline).unwrap_err()
            }
        });
        let mut kv = RelayKv::connect(&node, 0, world, deadline).unwrap();
        vec![kv.fence(deadline).unwrap_err(), h.join().unwrap()]
    }

    #[test]
    fn a_failure_naming_many_missing_ranks_reaches_every_local_rank() {
        // Most of a large job never came: one run of ranks.
        let world = 100_000;
        let most: Vec<usize> = (2..world).collect();
        for f in failed_through_relay(world, most.clone(), "most never came") {
            assert_eq!(f.message, "most never came");
            assert!(f.missing == most, "{} ranks named", f.missing.len());
        }
        // Every other rank (the most runs a job of 40000 can have), and a
        // message naming each: the list whole, the message cut.
        let world = 40_000;
        let odd: Vec<usize> = (1..world).step_by(2).collect();
        let long = "x".repeat(3000) + &"\u{e9}".repeat(50_000);
        for f in failed_through_relay(world, odd.clone(), &long) {
            assert!(f.missing == odd, "{} ranks named", f.missing.len());
            let kept = "x".repeat(3000) + &"\u{e9}".repeat(1000);
            assert_eq!(f.message, format!("{kept}... (98000 more bytes)"));
        }
        // Ranks in any order, twice: sent once each, in order.
        let f = Failed {
            message: "m".into(),
            missing: vec![5, 1, 2, 5, 0],
        };
        let sent = encode_failed(&f);
        assert_eq!(sent.len(), 8 + 2 * 16 + 1);
        assert_eq!(decode_failed(&sent, 6).missing, [0, 1, 2, 5]);
        // A relay's runs out of order, empty, or past the job: unread.
        let runs = |v: &[u64]| -> Vec<u8> {
            let mut b = ((v.len() / 2) as u64).to_le_bytes().to_vec();
            v.iter().for_each(|x| b.extend_from_slice(&x.to_le_bytes()));
            b
        };
        for bad in [
            &[3, 2, 0, 1][..],
            &[0, 2, 1, 1],
            &[1, 0],
            &[5, 2],
            &[u64::MAX, 2],
        ] {
            assert_eq!(
                decode_failed(&runs(bad), 6).message,
                "the node's relay sent a failure this process cannot read",
                "{bad:?}"
            );
        }
        assert_eq!(decode_failed(&runs(&[4, 2]), 6).missing, [4, 5]);
    }

    /// A relay of a job of 4 with one local process, rank 1, said hello
    /// on a socket whose replies a thread reads and drops.
    fn relay_with_one_member(store: Arc<Store>) -> (Relay, std::thread::JoinHandle<()>) {
        let hub = Box::new(MemHub(store)) as Box<dyn Hub>;
        let mut r = Relay::new(Ok(hub), 4, 2, 0, Arc::default());
        let (a, b) = UnixStream::pair().unwrap();
        r.joined(0, peer(a));
        let sink = std::thread::spawn(move || {
            let mut b = b;
            let _ = b.read_to_end(&mut Vec::new());
        });
        let mut hello = 1u64.to_le_bytes().to_vec();
        hello.extend_from_slice(&4u64.to_le_bytes());
        r.frame(0, HELLO, &hello);
        (r, sink)
    }

    fn get_body(from: u64, key: &str) -> Vec<u8> {
        let mut get = from.to_le_bytes().to_vec();
        put_str(&mut get, key.as_bytes());
        get
    }

    #[test]
    fn the_get_cache_is_bounded_whoever_asks() {
        let store = Store::new(4);
        let (mut r, sink) = relay_with_one_member(store.clone());
        let mut put = Vec::new();
        put_str(&mut put, b"k");
        put_str(&mut put, &[7u8; 60 * 1024]);
        r.frame(0, PUT, &put);
        // One key asked as if of 1000 ranks: one copy kept.
        for from in 0..1000 {
            r.frame(0, GET, &get_body(from, "k"));
        }
        assert_eq!(r.cache.len(), 1);
        // It is served from there (the store's later value is not read).
        store
            .keys
            .lock()
            .unwrap()
            .push(("k".into(), b"later".to_vec()));
        assert_eq!(r.get(&get_body(3, "k")).unwrap(), [7u8; 60 * 1024]);
        // 100 keys of 60 KiB: the oldest are dropped past the bound.
        for i in 0..100 {
            let mut put = Vec::new();
            put_str(&mut put, format!("k{i}").as_bytes());
            put_str(&mut put, &[i as u8; 60 * 1024]);
            r.frame(0, PUT, &put);
            r.frame(0, GET, &get_body(1, &format!("k{i}")));
        }
        assert!(r.cache.bytes() <= CACHE_BYTES, "{}", r.cache.bytes());
        assert_eq!(r.cache.len(), CACHE_BYTES / (60 * 1024 + 2 + 64));
        assert_eq!(r.get(&get_body(1, "k99")).unwrap(), [99u8; 60 * 1024]);
        r.drop_peer(0);
        sink.join().unwrap();
    }

    /// Set in a child process of this test binary: the test named plays
    /// its child's part (what changes the whole process, as its limit on
    /// descriptors, is never done in the process whose tests run in
    /// parallel).
    const CHILD: &str = "NCCL_FIND_RELAY_TEST_CHILD";

    fn in_child() -> bool {
        std::env::var_os(CHILD).is_some()
    }

    /// Test `name` of this binary, run again in a child process as
    /// [`CHILD`], its stdin and stdout piped.
    fn child(name: &str) -> std::process::Child {
        let module = module_path!().split_once("::").unwrap().1;
        std::process::Command::new(std::env::current_exe().unwrap())
            .args([&format!("{module}::{name}"), "--exact", "--nocapture"])
            .args(["--test-threads=1", "-q"])
            .env(CHILD, "1")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Waits at most `secs` for `c` (killed past them): its lines on
    /// stdout that start with `child: `, without that.
    fn finish(mut c: std::process::Child, secs: u64) -> Vec<String> {
        drop(c.stdin.take());
        let mut out = c.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = out.read_to_string(&mut s);
            s
        });
        let until = Instant::now() + Duration::from_secs(secs);
        let status = loop {
            if let Some(st) = c.try_wait().unwrap() {
                break st;
            }
            if Instant::now() > until {
                let _ = c.kill();
                let _ = c.wait();
                panic!("the child ran past {secs} s: {}", reader.join().unwrap());
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let text = reader.join().unwrap();
        assert!(status.success(), "{status}: {text}");
        text.lines()
            .filter_map(|l| l.strip_prefix("child: ").map(String::from))
            .collect()
    }

    /// In a child: its descriptors limited to `soft` (and `hard`).
    fn limit_fds(soft: u64, hard: u64) {
        assert!(in_child(), "only a child process changes its limits");
        assert!(set_fd_soft_limit(soft, hard), "{soft} {hard}");
    }

    #[test]
    fn a_soft_descriptor_limit_too_low_for_the_node_is_raised() {
        if in_child() {
            // 200 processes on the node: 400 descriptors in this process
            // (both ends), where 40 are left.
            let (n, hard) = (200, fd_limit().1);
            limit_fds(fds_open() + 40, hard);
            let via = Arc::new(via("raise", &[n]));
            for (r, g) in run(via, &[], 60).iter().enumerate() {
                let g = g.as_ref().unwrap();
                assert_eq!((g.0, g.1), (n, r));
            }
            assert_eq!(fd_limit(), (hard, hard));
            println!("child: {n} met, the soft limit raised to the hard one");
            return;
        }
        let got = finish(
            child("a_soft_descriptor_limit_too_low_for_the_node_is_raised"),
            120,
        );
        assert_eq!(got, ["200 met, the soft limit raised to the hard one"]);
    }

    #[test]
    fn too_few_descriptors_even_at_the_hard_limit_are_said_to_every_local_rank() {
        if in_child() {
            let open = fds_open();
            limit_fds(open + 30, open + 30);
            let node = Node::new(&unique("short"), "/p/", 0, 200, 0);
            serve(&node, 0, 200, || panic!("the store is never opened")).unwrap();
            let deadline = Instant::now() + Duration::from_secs(60);
            let want = format!(
                "local rank 0 may have {0} file descriptors open (ulimit -n; the hard limit is {0}), \
                 {open} already: too few to relay for LOCAL_WORLD_SIZE=200, one per process. Raise \
                 ulimit -n to {1} or more, or set NCCL_FIND_STORE_RELAY=0",
                open + 30,
                open + 200 + FD_SLACK
            );
            let mut kvs = Vec::new();
            for r in [0, 1] {
                let mut kv = RelayKv::connect(&node, r, 200, deadline).unwrap();
                assert_eq!(kv.put("k", b"v").unwrap_err(), want);
                kvs.push(kv);
            }
            println!("child: told");
            return;
        }
        let name = "too_few_descriptors_even_at_the_hard_limit_are_said_to_every_local_rank";
        assert_eq!(finish(child(name), 120), ["told"]);
    }

    /// The descriptor limit that leaves this process `k` more.
    fn limit_leaving(k: usize) -> u64 {
        let listed: Vec<i32> = std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        // The listing's own descriptor is closed by now.
        // SAFETY: F_GETFD only asks about a descriptor number.
        let open: Vec<i32> = listed
            .into_iter()
            .filter(|fd| unsafe { libc::fcntl(*fd, libc::F_GETFD) } != -1)
            .collect();
        let free = (0..).filter(|fd| !open.contains(fd)).nth(k - 1).unwrap();
        free as u64 + 1
    }

    /// A process's CPU time so far, in seconds (from /proc).
    fn cpu_of(pid: u32) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let f: Vec<&str> = stat
            .rsplit_once(')')
            .unwrap()
            .1
            .split_whitespace()
            .collect();
        let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        ticks as f64 / hz as f64
    }

    /// The child's side of the test below: a relay for a node of `n`, left
    /// 5 descriptors, serving until the test is done.
    fn serve_with_five_descriptors_left(n: usize) {
        let node = Node::new(&unique("emfile"), "/p/", 0, n, 0);
        let store = Store::new(n);
        serve(&node, 0, n, move || {
            Ok(Box::new(MemHub(store)) as Box<dyn Hub>)
        })
        .unwrap();
        // Then a limit that leaves 5 free (no other thread opens any; one
        // an accept waits on, not yet shown open, is among them).
        let limit = limit_leaving(5);
        limit_fds(limit, fd_limit().1);
        println!("child: {} {limit}", node.name);
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
    }

    /// Runs out of descriptors after 5 connections: the child serves, the
    /// test connects (so that only the relay's descriptors count there).
    #[test]
    fn out_of_descriptors_the_relay_says_so_to_each_process_and_never_spins() {
        let n = 20;
        if in_child() {
            serve_with_five_descriptors_left(n);
            return;
        }
        let mut c = child("out_of_descriptors_the_relay_says_so_to_each_process_and_never_spins");
        let mut out = std::io::BufReader::new(c.stdout.take().unwrap());
        let mut line = String::new();
        while !line.starts_with("child: ") {
            line.clear();
            assert_ne!(std::io::BufRead::read_line(&mut out, &mut line).unwrap(), 0);
        }
        let (name, limit) = line["child: ".len()..].trim().split_once(' ').unwrap();
        let node = Node {
            name: name.into(),
            size: n,
            local_rank: 1,
        };
        let ss: Vec<UnixStream> = (0..n)
            .map(|r| {
                let mut s = raw(&node);
                let mut hello = (r as u64).to_le_bytes().to_vec();
                hello.extend_from_slice(&(n as u64).to_le_bytes());
                write_frame(&mut s, HELLO, &hello).unwrap();
                s
            })
            .collect();
        let told = format!(
            "local rank 0 ran out of file descriptors (ulimit -n {limit}) relaying for \
             LOCAL_WORLD_SIZE={n}: raise ulimit -n, or set NCCL_FIND_STORE_RELAY=0"
        );
        let (mut ok, mut away) = (Vec::new(), 0);
        for (r, mut s) in ss.into_iter().enumerate() {
            match read_frame(&mut s, |_| MAX_FRAME).unwrap() {
                (0, _) => ok.push((r, s)),
                (1, why) => {
                    assert_eq!(decode_failed(&why, n).message, told);
                    away += 1;
                }
                (st, _) => panic!("status {st}"),
            }
        }
        // One descriptor per connection.
        assert_eq!((ok.len(), away), (5, n - 5));
        // Nothing waits: the relay's threads are idle.
        let cpu = cpu_of(c.id());
        std::thread::sleep(Duration::from_secs(2));
        let spent = cpu_of(c.id()) - cpu;
        assert!(spent < 0.25, "{spent} s of CPU in 2 s");
        // The node's barrier fails saying so, naming those never there.
        let mut fence = 0u64.to_le_bytes().to_vec();
        fence.extend_from_slice(&5000u64.to_le_bytes());
        for (_, s) in &mut ok {
            write_frame(s, FENCE, &fence).unwrap();
        }
        // Taken in the order they came.
        let k = ok.len();
        let came: Vec<usize> = ok.iter().map(|o| o.0).collect();
        assert_eq!(came, (0..k).collect::<Vec<_>>());
        let missing: Vec<usize> = (k..n).collect();
        let message = format!(
            "{told}; only {k} of LOCAL_WORLD_SIZE={n} processes came to this node's relay (ranks \
             0-{}): one never started, or fewer run on this node than torchrun says (check \
             --nproc-per-node); barrier 0: missing {missing:?}",
            k - 1
        );
        for (_, s) in &mut ok {
            let (st, why) = read_frame(s, |_| MAX_FRAME).unwrap();
            let f = decode_failed(&why, n);
            assert_eq!(st, 1);
            assert_eq!(f.message, message);
            assert_eq!(f.missing, missing);
        }
        drop(ok);
        c.stdout = Some(out.into_inner());
        assert!(finish(c, 60).is_empty());
    }

    /// A hub whose puts wait until the test drops the gate's sender.
    struct Gated {
        gate: mpsc::Receiver<()>,
        inner: MemHub,
    }

    impl Hub for Gated {
        fn put(&mut self, key: &str, value: &[u8]) -> Result<(), String> {
            let _ = self.gate.recv();
            self.inner.put(key, value)
        }
        fn get(&mut self, from: usize, key: &str) -> Result<Vec<u8>, String> {
            self.inner.get(from, key)
        }
        fn arrive(&mut self, n: u64, rank: usize) -> Result<(), Failed> {
            self.inner.arrive(n, rank)
        }
        fn pass(&mut self, n: u64, count: usize, deadline: Instant) -> Result<(), Failed> {
            self.inner.pass(n, count, deadline)
        }
        fn never_came(&mut self, n: u64) -> Failed {
            self.inner.never_came(n)
        }
        fn close(&mut self) {}
    }

    /// How many bytes of `frame`, sent again and again (up to 256 MiB),
    /// `s` takes before a write waits 1 s.
    fn flood(s: &mut UnixStream, frame: &[u8]) -> usize {
        s.set_write_timeout(Some(Duration::from_secs(1))).unwrap();
        let mut sent = 0;
        while sent < 256 << 20 && s.write_all(frame).is_ok() {
            sent += frame.len();
        }
        sent
    }

    #[test]
    fn a_flood_of_frames_while_the_relay_is_busy_is_not_queued() {
        let node = Node::new(&unique("flood"), "/p/", 0, 2, 0);
        let (open_gate, gate) = mpsc::channel();
        let inner = MemHub(Store::new(2));
        serve(&node, 0, 2, move || {
            Ok(Box::new(Gated { gate, inner }) as Box<dyn Hub>)
        })
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut flooder = RelayKv::connect(&node, 1, 2, deadline).unwrap();
        let mut busy = RelayKv::connect(&node, 0, 2, deadline).unwrap();
        // Rank 0's put holds the relay's thread in the store.
        let h = std::thread::spawn(move || busy.put("k", b"v"));
        std::thread::sleep(Duration::from_millis(300));
        // Rank 1 sends put after put without waiting for answers; a
        // stranger sends puts before any hello.
        let mut put = Vec::new();
        put_str(&mut put, b"k1");
        put_str(&mut put, &vec![1u8; MAX_FRAME - 10]);
        let mut frame = vec![PUT];
        frame.extend_from_slice(&(put.len() as u32).to_le_bytes());
        frame.extend_from_slice(&put);
        let sent = flood(&mut flooder.s, &frame);
        assert!(sent < 16 << 20, "{} MiB taken from one member", sent >> 20);
        let sent = flood(&mut raw(&node), &frame);
        assert!(sent < 16 << 20, "{} MiB taken from a stranger", sent >> 20);
        drop(open_gate);
        assert_eq!(h.join().unwrap(), Ok(()));
    }

    #[test]
    fn idle_connections_that_never_say_hello_do_not_lock_out_the_node() {
        let via = via("idle", &[2]);
        let store = via.store.clone();
        serve(&via.nodes[0], 0, 2, move || {
            Ok(Box::new(MemHub(store)) as Box<dyn Hub>)
        })
        .unwrap();
        // As many as may wait: every slot the node's processes have too.
        let mut idle: Vec<UnixStream> =
            (0..2 + MAX_STRANGERS).map(|_| raw(&via.nodes[0])).collect();
        std::thread::sleep(Duration::from_millis(300));
        let deadline = Instant::now() + Duration::from_secs(60);
        let t = Instant::now();
        let kv = RelayKv::connect(&via.nodes[0], 0, 2, deadline).map(|_| ());
        assert_eq!(kv, Ok(()));
        assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
        // They were closed, unanswered.
        for s in &mut idle {
            let mut b = Vec::new();
            assert_eq!(s.read_to_end(&mut b).map(|_| b.len()).ok(), Some(0));
        }
    }

    #[test]
    fn a_connection_whose_reader_never_starts_gives_its_slot_back() {
        let shared = Arc::new(Shared::default());
        let (tx, rx) = mpsc::sync_channel(EVENTS);
        let (a, _b) = UnixStream::pair().unwrap();
        let (_turn, turned) = mpsc::sync_channel(1);
        let waiting = Waiting::new(&shared);
        assert_eq!(shared.waiting.load(Ordering::SeqCst), 1);
        // A stack no thread can have (32 PiB).
        assert!(!start_reader(7, Arc::new(a), &tx, turned, waiting, 1 << 45));
        assert_eq!(shared.waiting.load(Ordering::SeqCst), 0);
        assert!(matches!(rx.try_recv(), Ok(Event::Gone(7))));
    }

    #[test]
    fn names_keep_jobs_nodes_and_restarts_apart() {
        let a = Node::new("h:1", "/nccl-find/r/0/", 0, 2, 0);
        assert!(a.name.starts_with("nccl-find/relay/"));
        assert!(a.name.len() < 100, "{}", a.name);
        for b in [
            Node::new("h:2", "/nccl-find/r/0/", 0, 2, 0),
            Node::new("h:1", "/nccl-find/r/1/", 0, 2, 0),
            Node::new("h:1", "/nccl-find/r/0/", 1, 2, 0),
        ] {
            assert_ne!(a.name, b.name);
        }
        assert_eq!(a.name, Node::new("h:1", "/nccl-find/r/0/", 0, 4, 3).name);
    }
}
