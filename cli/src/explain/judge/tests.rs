//! The judge on lines made here: what a process said before, and who is
//! who, where only some lines say.

use super::*;
use crate::explain::line;
use crate::rules::messages::{Known, Shape};

/// The events of `lines` (one input each, in order).
fn events(inputs: &[&[&str]]) -> Vec<Event> {
    let known = Known::new();
    let mut out = Vec::new();
    for (i, lines) in inputs.iter().enumerate() {
        for (n, text) in lines.iter().enumerate() {
            let parsed = line::parse(text);
            let shape = Shape {
                level: parsed.level,
                file: parsed.file,
            };
            if let Some(hit) = known.read(parsed.text, shape) {
                out.push(Event::new(i, n as u64 + 1, text, &parsed, hit));
            }
        }
    }
    out
}

fn none(_: &str, _: &BTreeMap<&'static str, String>) -> Option<String> {
    None
}

#[test]
fn nccls_lists_are_read_for_their_first_interface() {
    assert_eq!(
        first_iface(" [0]eth0:10.0.0.1<0> [1]ib0:10.1.0.1<0>").as_deref(),
        Some("eth0 (10.0.0.1)")
    );
    assert_eq!(
        first_iface(" ib0:10.99.0.2<0>").as_deref(),
        Some("ib0 (10.99.0.2)")
    );
    assert_eq!(first_iface(""), None);
    assert_eq!(ib_status("12"), Some("transport retry counter exceeded"));
    assert_eq!(ib_status("IBV_WC_SUCCESS"), None);
}

/// A line without a rank takes its process's, from its communicator's
/// line, and the interface its process took is the cause's.
#[test]
fn a_process_lends_its_rank_and_interface_to_its_lines() {
    let ev = events(&[&[
        "node2:7:7 [0] NCCL INFO Bootstrap : Using ib0:10.99.0.2<0>",
        "node2:7:7 [0] NCCL INFO comm 0x1 rank 1 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE",
        "node2:7:9 [0] misc/socket.cc:484 NCCL WARN socketPollConnect: connect to 10.99.0.1<5> returned No route to host, exceeded error retry count after 35 attempts",
    ]]);
    let a = judge(&ev, &[99], &none);
    assert_eq!(
        (a.verdict, a.failure),
        (Verdict::Cause, Some(Failure::Unreachable))
    );
    assert_eq!(
        (a.ranks.as_slice(), a.hosts.as_slice()),
        (&[1][..], &["node2".to_string()][..])
    );
    assert_eq!(
        a.what,
        "ib0 (10.99.0.2) does not reach 10.99.0.1 (No route to host)"
    );
    assert_eq!(
        a.evidence.iter().map(|q| q.line).collect::<Vec<_>>(),
        [1, 3]
    );
}

/// A setup that differs is a note where the job set up and ended well,
/// and the cause where it did not.
#[test]
fn a_difference_is_a_cause_only_of_a_job_that_did_not_set_up() {
    let v1 = "NCCL version 2.19.3+cuda12.3";
    let v2 = "NCCL version 2.20.5+cuda12.4";
    let done =
        "node1:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE";
    let a = judge(&events(&[&[v1], &[v2]]), &[9, 9], &none);
    assert_eq!(a.failure, Some(Failure::VersionMismatch));
    let b = judge(&events(&[&[v1, done], &[v2]]), &[9, 9], &none);
    assert_eq!((b.verdict, b.notes.len()), (Verdict::NoFailure, 1));
    assert!(b.notes[0].starts_with("the logs show version-mismatch: ranks run different NCCL releases (2.19.3+cuda12.3 on input 1, 2.20.5+cuda12.4 on input 2)"), "{:?}", b.notes);
}

/// Without times, the most basic class is the cause; a completion error
/// on RoCE that ran out of retries is the GID's.
#[test]
fn without_times_the_most_basic_class_is_named() {
    let ev = events(&[&[
        "node1:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE ; OOB eth0:10.0.0.1<0>",
        "node1:1:2 [0] transport/net_ib.cc:1 NCCL WARN NET/IB : Got completion from peer 10.0.0.2<1> with error 12, opcode 0, len 0, vendor err 129",
        "node1:1:2 [0] include/alloc.h:1 NCCL WARN Cuda failure 'out of memory'",
    ]]);
    assert_eq!(judge(&ev, &[99], &none).failure, Some(Failure::Oom));
    let ib = &ev[..2];
    assert_eq!(judge(ib, &[99], &none).failure, Some(Failure::IbGid));
}

/// A later release that fixed a bug on the path named is said beside it,
/// where the logs say which NCCL ran.
#[test]
fn a_later_fix_on_the_path_is_noted() {
    let ev = events(&[&[
        "NCCL version 2.18.1+cuda12.1",
        "node1:1:1 [0] misc/shmutils.cc:80 NCCL WARN Error while creating shared memory segment /dev/shm/nccl-x (size 9637888)",
    ]]);
    let a = judge(&ev, &[9], &none);
    assert_eq!(a.failure, Some(Failure::Shm));
    assert_eq!(
        a.notes,
        ["NCCL 2.18.1 ran; a later release's notes say it fixed a bug on this path: 2.18.3: \"Fix crash when shared memory creation fails.\"; 2.26.2: \"Fix shared memory usage on recent Blackwell GPUs.\""]
    );
}
