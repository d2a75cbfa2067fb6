//! The TCP store's tests: admission, the store, and what a hostile peer gets.

use super::*;
use crate::proof::NONCE_LEN;
use crate::testutil::*;
use crate::wire::{decode, decode_header, encode};
use crate::words::same_token;
use crate::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};

fn tcp(port: u16) -> Init {
    Init::Tcp {
        host: "127.0.0.1".into(),
        port,
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn connect(port: u16) -> TcpStream {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => return s,
            Err(e) if Instant::now() > until => panic!("{e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

fn wait() -> Option<Instant> {
    Some(Instant::now() + Duration::from_secs(20))
}

/// A peer speaking the frames by hand: connects, reads the challenge,
/// and says hello as `rank` of `world` with a proof of `token`. The
/// connection, the challenge and the peer's nonce.
fn raw_hello(
    port: u16,
    token: &str,
    rank: u32,
    world: u32,
) -> (TcpStream, [u8; NONCE_LEN], [u8; NONCE_LEN]) {
    let mut s = connect(port);
    let Msg::Challenge { nonce: challenge } = read_msg(&mut s, wait()).unwrap() else {
        panic!("no challenge")
    };
    let nonce = proof::nonce();
    let hello = Msg::Hello {
        rank,
        world,
        ngpus: 1,
        nonce,
        proof: hello_proof(token, &nonce, &challenge, rank, world, 1),
    };
    s.write_all(&encode(&hello)).unwrap();
    (s, challenge, nonce)
}

/// A welcomed peer speaking the store by hand: its hello (one GPU) and
/// the three barriers of the meeting.
fn raw_meet(s: &mut TcpStream, rank: usize) {
    let hello = Msg::Put {
        key: format!("nccl-find/hello/{rank}"),
        value: 1u32.to_le_bytes().to_vec(),
    };
    s.write_all(&encode(&hello)).unwrap();
    for n in [0, 1, 2] {
        s.write_all(&encode(&Msg::Arrive { n })).unwrap();
        assert_eq!(read_msg(s, wait()), Ok(Msg::Pass { n }));
    }
}

/// Rank 0 of a world of `world` on a thread, with the notes it logged.
fn tcp_rank0_of(
    port: u16,
    token: &'static str,
    world: usize,
    secs: u64,
) -> std::thread::JoinHandle<(Result<usize, String>, Vec<String>)> {
    std::thread::spawn(move || {
        let mut notes = Vec::new();
        let r = join(&job(0, world, token, tcp(port), secs), &id, &mut |m| {
            notes.push(m)
        });
        (r.map(|j| j.nranks).map_err(|f| f.message), notes)
    })
}

fn tcp_rank0(
    port: u16,
    token: &'static str,
    secs: u64,
) -> std::thread::JoinHandle<(Result<usize, String>, Vec<String>)> {
    tcp_rank0_of(port, token, 2, secs)
}

#[test]
fn a_wrong_token_is_refused_without_sending_the_real_one() {
    let port = free_port();
    let r0 = tcp_rank0(port, "s3cret-token-xyz", 3);
    let (mut s, _, _) = raw_hello(port, "s3cret-token-xyA", 1, 2);
    let reply = read_msg(&mut s, wait()).unwrap();
    let Msg::Refused { reason } = reply else {
        panic!("{reply:?}")
    };
    assert!(reason.starts_with("token mismatch"), "{reason}");
    assert!(!reason.contains("s3cret"), "{reason}");
    let (r, notes) = r0.join().unwrap();
    assert!(r
        .unwrap_err()
        .starts_with("rank 1 never came to tcp://127.0.0.1:"));
    assert!(notes.iter().all(|n| !n.contains("s3cret")), "{notes:?}");
    assert!(same_token("abc", "abc") && !same_token("abc", "abd") && !same_token("abc", "ab"));
}

#[test]
fn a_rank_0_that_does_not_know_the_token_learns_nothing_and_is_not_believed() {
    let token = "the-job-token-4f1c";
    // A listener that is not this job's rank 0: it sends a challenge,
    // keeps the hello, and answers with an id and a made-up proof.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let fake = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.write_all(&encode(&Msg::Challenge { nonce: [5; 16] }))
            .unwrap();
        let mut h = [0u8; 10];
        wire::read_full(&mut s, &mut h, wait()).unwrap();
        let (_, len) = decode_header(&h).unwrap();
        let mut hello = vec![0u8; len];
        wire::read_full(&mut s, &mut hello, wait()).unwrap();
        let Ok(Msg::Hello { nonce, .. }) = decode(1, &hello) else {
            panic!("{hello:?}")
        };
        let welcome = Msg::Welcome {
            proof: welcome_proof("a-guess", &[5; 16], &nonce, 1, 2),
        };
        s.write_all(&encode(&welcome)).unwrap();
        hello
    });
    let e = join(&job(1, 2, token, tcp(port), 20), &id, &mut |_| {})
        .err()
        .unwrap()
        .message;
    assert_eq!(
        e,
        format!(
            "the rank 0 at tcp://127.0.0.1:{port} (127.0.0.1:{port}) does not know this job's token: \
             it is another job's rank 0 (or not nccl-find), and nothing it sends is used. Give every \
             rank the same --token (or NCCL_FIND_TOKEN), or choose another port"
        )
    );
    let hello = fake.join().unwrap();
    assert_eq!(hello.len(), MAX_HELLO);
    assert!(!hello.windows(token.len()).any(|w| w == token.as_bytes()));
}

#[test]
fn a_port_held_on_any_address_of_the_name_is_in_use() {
    // Two addresses of one name (as `localhost` has ::1 and 127.0.0.1):
    // another job holds the port on the second.
    let held = TcpListener::bind("127.0.0.2:0").unwrap();
    let port = held.local_addr().unwrap().port();
    let addrs: Vec<SocketAddr> = vec![
        format!("127.0.0.1:{port}").parse().unwrap(),
        format!("127.0.0.2:{port}").parse().unwrap(),
    ];
    let e = listen_all("twohomes", port, &addrs).err().unwrap();
    // 98: EADDRINUSE on Linux.
    assert_eq!(
        e,
        format!(
            "rank 0 cannot listen on twohomes:{port} (127.0.0.2:{port}): {}. Another job may hold the \
             port: choose another one (or stop that job)",
            std::io::Error::from_raw_os_error(98)
        )
    );
    drop(held);
    // Free on both: rank 0 listens on both (each address, once).
    let mut twice = addrs.clone();
    twice.extend(addrs.clone());
    let ls = listen_all("twohomes", port, &twice).unwrap();
    let got: Vec<SocketAddr> = ls.iter().map(|l| l.local_addr().unwrap()).collect();
    assert_eq!(got, addrs);
}

#[test]
fn a_restarted_rank_takes_the_place_of_its_dead_connection() {
    let port = free_port();
    let r0 = tcp_rank0_of(port, "t", 3, 30);
    // Rank 1 says hello, and its process dies before the welcome.
    let (dead, _, _) = raw_hello(port, "t", 1, 3);
    drop(dead);
    // Its restart comes; then a second rank 1 while the first is alive.
    let (mut again, challenge, nonce) = raw_hello(port, "t", 1, 3);
    let (mut twin, _, _) = raw_hello(port, "t", 1, 3);
    let reply = read_msg(&mut twin, wait()).unwrap();
    assert_eq!(
        reply,
        Msg::Refused {
            reason: "rank 1 arrived twice".into()
        }
    );
    // Rank 2 stays in the job to its end: a rank that leaves before it
    // reports stops the others, and the raw rank 1 would hear that.
    let peer2 = std::thread::spawn(move || {
        join(&job(2, 3, "t", tcp(port), 30), &id, &mut |_| {}).map_err(|f| f.message)
    });
    let Msg::Welcome { proof: p } = read_msg(&mut again, wait()).unwrap() else {
        panic!("no welcome")
    };
    assert_eq!(p, welcome_proof("t", &challenge, &nonce, 1, 3));
    raw_meet(&mut again, 1);
    let peer2 = peer2.join().unwrap();
    assert_eq!(peer2.as_ref().map(|j| j.first_rank), Ok(2));
    let (r, notes) = r0.join().unwrap();
    assert_eq!(r, Ok(3), "{notes:?}");
    assert_eq!(
        notes.iter().filter(|n| n.contains("came again")).count(),
        1,
        "{notes:?}"
    );
    drop((again, twin, peer2));
}

/// Past the first few, peers are named by host while the hosts are few,
/// and in one line when they are many: 255 nodes of one rank each are one
/// line, not 255.
#[test]
fn many_hosts_that_joined_are_one_line() {
    let ip = |i: usize| std::net::IpAddr::from([10, 0, (i / 250) as u8, (i % 250) as u8]);
    let few: Vec<_> = [(ip(1), 9), (ip(1), 7), (ip(2), 8)].to_vec();
    assert_eq!(
        super::joined_lines(few),
        [
            "2 more rank(s) joined from 10.0.0.1: 7, 9",
            "1 more rank(s) joined from 10.0.0.2: 8"
        ]
    );
    let many: Vec<_> = (5..256).map(|r| (ip(r), r)).collect();
    assert_eq!(
        super::joined_lines(many),
        ["251 more rank(s) joined from 251 other hosts: 5-255"]
    );
}

#[test]
fn rank_0_names_each_peer_it_admitted() {
    let port = free_port();
    let world = JOINED_SHOWN + 4;
    let r0 = tcp_rank0_of(port, "t", world, 60);
    let mut conns = Vec::new();
    let mut want = Vec::new();
    for r in 1..world {
        let (s, _, _) = raw_hello(port, "t", r as u32, world as u32);
        if r <= JOINED_SHOWN {
            want.push(format!("rank {r} joined from {}", s.local_addr().unwrap()));
        }
        conns.push(s);
    }
    want.push(format!(
        "3 more rank(s) joined from 127.0.0.1: {}-{}",
        JOINED_SHOWN + 1,
        JOINED_SHOWN + 3
    ));
    let peers: Vec<_> = conns
        .into_iter()
        .enumerate()
        .map(|(i, mut s)| {
            std::thread::spawn(move || {
                assert!(matches!(read_msg(&mut s, wait()), Ok(Msg::Welcome { .. })));
                raw_meet(&mut s, i + 1);
                s
            })
        })
        .collect();
    let _conns: Vec<TcpStream> = peers.into_iter().map(|p| p.join().unwrap()).collect();
    let (r, notes) = r0.join().unwrap();
    assert_eq!(r, Ok(world), "{notes:?}");
    assert_eq!(notes, want);
}

#[test]
fn a_peers_done_message_is_escaped() {
    let port = free_port();
    let r0 = std::thread::spawn(move || {
        let j = join(&job(0, 2, "t", tcp(port), 20), &id, &mut |_| {}).unwrap();
        j.finish(true, 0, "", Duration::from_secs(20))
    });
    let (mut s, _, _) = raw_hello(port, "t", 1, 2);
    assert!(matches!(read_msg(&mut s, wait()), Ok(Msg::Welcome { .. })));
    raw_meet(&mut s, 1);
    // The peer's outcome, as a hostile one would put it.
    let mut done = vec![1u8];
    done.extend_from_slice(&0u64.to_le_bytes());
    done.push(0);
    done.extend_from_slice("\x1b[2Jfine\nrank 9: OK\u{202e}".as_bytes());
    let put = Msg::Put {
        key: done_key(1),
        value: done,
    };
    s.write_all(&encode(&put)).unwrap();
    for n in [3, 4] {
        s.write_all(&encode(&Msg::Arrive { n })).unwrap();
        assert_eq!(read_msg(&mut s, wait()), Ok(Msg::Pass { n }));
    }
    assert_eq!(
        r0.join().unwrap(),
        vec![PeerOutcome {
            rank: 1,
            done: Some((true, 0, "\\u{1b}[2Jfine\\u{a}rank 9: OK\\u{202e}".into())),
            times_us: Vec::new(),
            why: None,
        }]
    );
}

#[test]
fn a_slow_drip_peer_cannot_hold_rank_0_past_its_deadline() {
    let port = free_port();
    let t = Instant::now();
    let r0 = tcp_rank0(port, "t", 3);
    let mut s = connect(port);
    let Msg::Challenge { nonce: challenge } = read_msg(&mut s, wait()).unwrap() else {
        panic!("no challenge")
    };
    // A valid hello, one byte every 500 ms (each read sees data well
    // within any per-read timeout).
    let frame = encode(&Msg::Hello {
        rank: 1,
        world: 2,
        ngpus: 1,
        nonce: [1; 16],
        proof: hello_proof("t", &[1; 16], &challenge, 1, 2, 1),
    });
    let drip = std::thread::spawn(move || {
        for b in frame {
            if s.write_all(&[b]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    });
    let (r, _) = r0.join().unwrap();
    let e = r.unwrap_err();
    assert!(e.starts_with("rank 1 never came to tcp://"), "{e}");
    assert!(
        e.contains("1 other connection(s) sent no valid hello"),
        "{e}"
    );
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    drop(drip);

    // A peer waiting for its unique id: the same from a dripping rank 0.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let _ = s.write_all(&encode(&Msg::Challenge { nonce: [2; 16] }));
        for b in encode(&Msg::Welcome { proof: [0; 32] }) {
            if s.write_all(&[b]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    });
    let t = Instant::now();
    let e = join(&job(1, 2, "t", tcp(port), 2), &id, &mut |_| {})
        .err()
        .unwrap()
        .message;
    assert!(e.contains("no message before the deadline"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
}

/// A peer that stalls after the meeting (it never leaves its outcome):
/// rank 0's end names it, within the grace past the end's deadline
/// (before, closing the store waited 5 s, and the outcome came back
/// empty).
#[test]
fn a_peer_that_stalls_at_the_end_is_named_within_the_grace() {
    let port = free_port();
    let r0 = std::thread::spawn(move || {
        let j = join(&job(0, 2, "t", tcp(port), 20), &id, &mut |_| {}).unwrap();
        let t = Instant::now();
        let got = j.finish(true, 0, "", Duration::from_secs(2));
        (got, t.elapsed())
    });
    let (mut s, _, _) = raw_hello(port, "t", 1, 2);
    assert!(matches!(read_msg(&mut s, wait()), Ok(Msg::Welcome { .. })));
    raw_meet(&mut s, 1);
    let (got, took) = r0.join().unwrap();
    assert_eq!(
        got,
        vec![PeerOutcome {
            rank: 1,
            done: None,
            times_us: Vec::new(),
            why: Some(format!(
                "rank(s) 1 stopped answering: still connected to the rendezvous at \
                 tcp://127.0.0.1:{port}, they never reached barrier 3 within 20 s (1 of 2 processes \
                 did). Check their output (a process stopped or hung?), or raise --timeout"
            )),
        }]
    );
    assert!(took < Duration::from_secs(4), "{took:?}");
    drop(s);
}

/// A peer that puts more keys than the store takes is cut off, and
/// rank 0 and the other peer say so (it was reported as "went away").
#[test]
fn a_peer_that_breaks_a_limit_is_named_with_the_limit() {
    let port = free_port();
    let r0 = tcp_rank0_of(port, "t", 3, 30);
    let (mut s, _, _) = raw_hello(port, "t", 1, 3);
    let peer2 = std::thread::spawn(move || {
        join(&job(2, 3, "t", tcp(port), 30), &id, &mut |_| {})
            .map(|_| ())
            .map_err(|f| f.message)
    });
    assert!(matches!(read_msg(&mut s, wait()), Ok(Msg::Welcome { .. })));
    for k in 0..=MAX_KEYS {
        let put = Msg::Put {
            key: format!("k{k}"),
            value: vec![1],
        };
        if s.write_all(&encode(&put)).is_err() {
            break;
        }
    }
    let (r, _) = r0.join().unwrap();
    let want = format!(
        "rank 1 put more than 256 keys (nccl-find puts a few): rank 0 cut it off before barrier 0 of \
         the rendezvous at tcp://127.0.0.1:{port}. Check that every rank runs this version of \
         nccl-find, and that nothing else connects to its port"
    );
    assert_eq!(r, Err(want.clone()));
    assert_eq!(peer2.join().unwrap(), Err(want));
    // The connection was closed on it, without another word.
    let mut rest = Vec::new();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    assert_eq!(s.read_to_end(&mut rest).map_err(|e| e.kind()), Ok(0));
}

/// An admitted peer that stalls (its hello said, then not a word):
/// rank 0 names it at its deadline and ends within the grace (closing
/// the store waited 5 s for it to leave, past the 2 s grace, and rank 0
/// said only that the rendezvous did not end). The other peer hears
/// the same.
#[test]
fn a_stalled_peer_is_named_within_the_grace() {
    let port = free_port();
    let t = Instant::now();
    let r0 = tcp_rank0_of(port, "t", 3, 2);
    let (mut stalled, _, _) = raw_hello(port, "t", 1, 3);
    let peer2 = std::thread::spawn(move || {
        join(&job(2, 3, "t", tcp(port), 2), &id, &mut |_| {})
            .map(|_| ())
            .map_err(|f| f.message)
    });
    assert!(matches!(
        read_msg(&mut stalled, wait()),
        Ok(Msg::Welcome { .. })
    ));
    let (r, _) = r0.join().unwrap();
    let took = t.elapsed();
    let want = format!(
        "rank(s) 1 stopped answering: still connected to the rendezvous at tcp://127.0.0.1:{port}, \
         they never reached barrier 0 within 2 s (2 of 3 processes did). Check their output (a \
         process stopped or hung?), or raise --timeout"
    );
    assert_eq!(r, Err(want.clone()));
    assert!(took < Duration::from_secs(4), "{took:?}");
    assert_eq!(peer2.join().unwrap(), Err(want));
    drop(stalled);
}

#[test]
fn three_hundred_idle_connections_do_not_shut_out_a_real_rank() {
    let port = free_port();
    let r0 = tcp_rank0(port, "t", 30);
    // Once rank 0 listens, 300 connections that never say a word.
    let first = connect(port);
    let idle: Vec<TcpStream> = (0..300)
        .filter_map(|_| TcpStream::connect(("127.0.0.1", port)).ok())
        .collect();
    assert!(idle.len() >= 100, "{}", idle.len());
    let t = Instant::now();
    let peer = join(&job(1, 2, "t", tcp(port), 30), &id, &mut |_| {});
    let (r, notes) = r0.join().unwrap();
    assert_eq!(r, Ok(2), "{notes:?}");
    assert_eq!(peer.map(|j| j.first_rank).map_err(|f| f.message), Ok(1));
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    drop((first, idle));
}

/// Rank 0 hangs at the end (alive, its store serving, never reaching the
/// end-of-job fence): the peer, whose own run was right, ends within its
/// timeout naming rank 0, never itself.
#[test]
fn a_rank_0_that_hangs_at_the_end_is_named_by_the_peer() {
    let port = free_port();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let r0 = std::thread::spawn(move || {
        let j = join(&job(0, 2, "t", tcp(port), 20), &id, &mut |_| {}).unwrap();
        // Hung: holds the job, never finishes, until the test is done.
        let _ = rx.recv();
        drop(j);
    });
    let j = join(&job(1, 2, "t", tcp(port), 20), &id, &mut |_| {}).unwrap();
    let t = Instant::now();
    let got = j.finish(true, 0, "fine", Duration::from_secs(2));
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
    let _ = tx.send(());
    r0.join().unwrap();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!((got[0].rank, &got[0].done), (0, &None), "{got:?}");
    let why = got[0].why.clone().unwrap_or_default();
    assert!(why.starts_with("at the end of the job: "), "{why}");
    assert!(
        !why.contains("rank 1 never") && !why.contains("rank(s) 1 "),
        "{why}"
    );
}
