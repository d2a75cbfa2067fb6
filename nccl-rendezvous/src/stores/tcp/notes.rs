//! What rank 0 says of the connections it takes while the ranks meet:
//! refused ones, the first few by name and then a count; admitted peers,
//! the first few by name and then by host, or in one line where the hosts
//! are many.

use std::net::SocketAddr;

use crate::words::list;

/// Admitted peers named one by one in the log; the rest are counted.
pub(crate) const JOINED_SHOWN: usize = 4;

/// Notes about refused connections: the first few one by one, then a count.
/// And the peers admitted: the first few one by one, then every other one
/// by its host, its ranks run together.
pub(crate) struct Notes<'a> {
    log: &'a mut dyn FnMut(String),
    shown: usize,
    hidden: usize,
    joined_shown: usize,
    /// Host and rank of each admitted peer past the first few.
    joined_later: Vec<(std::net::IpAddr, usize)>,
}

impl<'a> Notes<'a> {
    /// Notes that go to `log`.
    pub(crate) fn new(log: &'a mut dyn FnMut(String)) -> Notes<'a> {
        Notes {
            log,
            shown: 0,
            hidden: 0,
            joined_shown: 0,
            joined_later: Vec::new(),
        }
    }
}

impl Notes<'_> {
    const SHOWN: usize = 20;
    /// A line said whatever the count.
    pub(crate) fn say(&mut self, m: String) {
        (self.log)(m);
    }
    pub(crate) fn note(&mut self, m: String) {
        if self.shown < Self::SHOWN {
            self.shown += 1;
            (self.log)(m);
        } else {
            self.hidden += 1;
        }
    }
    pub(crate) fn joined(&mut self, rank: usize, addr: SocketAddr) {
        if self.joined_shown < JOINED_SHOWN {
            self.joined_shown += 1;
            (self.log)(format!("rank {rank} joined from {addr}"));
        } else {
            self.joined_later.push((addr.ip(), rank));
        }
    }
    pub(crate) fn flush(&mut self) {
        for line in joined_lines(std::mem::take(&mut self.joined_later)) {
            (self.log)(line);
        }
        if self.hidden > 0 {
            (self.log)(format!(
                "{} more connection(s) refused or dropped (not shown)",
                std::mem::take(&mut self.hidden)
            ));
        }
    }
}

/// The peers admitted past the first few, by host, their ranks run
/// together: a line per host where there are a few hosts, one line in all
/// where there are more (a healthy job of many nodes says a few lines,
/// not one per node).
pub(crate) fn joined_lines(mut later: Vec<(std::net::IpAddr, usize)>) -> Vec<String> {
    later.sort_unstable();
    let mut by_host: Vec<(std::net::IpAddr, Vec<usize>)> = Vec::new();
    for (h, r) in later {
        match by_host.last_mut() {
            Some((last, ranks)) if *last == h => ranks.push(r),
            _ => by_host.push((h, vec![r])),
        }
    }
    if by_host.len() > JOINED_SHOWN {
        let mut all: Vec<usize> = by_host
            .iter()
            .flat_map(|(_, r)| r.iter().copied())
            .collect();
        all.sort_unstable();
        return vec![format!(
            "{} more rank(s) joined from {} other hosts: {}",
            all.len(),
            by_host.len(),
            list(&all)
        )];
    }
    by_host
        .iter()
        .map(|(host, ranks)| {
            format!(
                "{} more rank(s) joined from {host}: {}",
                ranks.len(),
                list(ranks)
            )
        })
        .collect()
}
