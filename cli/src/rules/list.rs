//! NCCL's one grammar for lists of names (`parseStringList` and
//! `matchIfList` in its `src/misc/utils.cc`), which `NCCL_SOCKET_IFNAME`
//! and `NCCL_IB_HCA` share: a leading `^` excludes what the list names, a
//! `=` after it makes names exact (else each is a prefix), and the list is
//! comma-separated entries `name[:port]` (an entry with no name is
//! skipped; later fields, rail and plane, name no device). NCCL reads at
//! most so many entries ([`IFACES`], [`HCAS`]).

/// The most entries NCCL reads of `NCCL_SOCKET_IFNAME` (`MAX_IFS`).
pub const IFACES: usize = 16;

/// The most entries NCCL reads of `NCCL_IB_HCA` (`MAX_IB_DEVS`).
pub const HCAS: usize = 32;

/// One entry: a name, or a prefix of names, and a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    /// The port, where given (`mlx5_0:1`); NCCL reads it with `atoi`.
    pub port: Option<i32>,
}

impl std::fmt::Display for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.port {
            Some(p) => write!(f, "{}:{p}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// A list, as NCCL reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct List {
    /// `^`: the list names what NCCL must not use.
    pub exclude: bool,
    /// `=`: names match whole, not as prefixes.
    pub exact: bool,
    pub entries: Vec<Entry>,
}

impl List {
    /// `value` as NCCL reads it, at most `max` entries.
    pub fn parse(value: &str, max: usize) -> List {
        let (exclude, rest) = match value.strip_prefix('^') {
            Some(r) => (true, r),
            None => (false, value),
        };
        let (exact, rest) = match rest.strip_prefix('=') {
            Some(r) => (true, r),
            None => (false, rest),
        };
        let mut entries = Vec::new();
        for e in rest.split(',') {
            if entries.len() == max {
                break;
            }
            let mut fields = e.split(':');
            let name = fields.next().unwrap_or("");
            if name.is_empty() {
                continue;
            }
            let port = fields.next().filter(|p| !p.is_empty()).map(atoi);
            // NCCL keeps 63 bytes of a name.
            let mut end = name.len().min(63);
            while !name.is_char_boundary(end) {
                end -= 1;
            }
            entries.push(Entry {
                name: name[..end].to_string(),
                port,
            });
        }
        List {
            exclude,
            exact,
            entries,
        }
    }

    /// Whether NCCL takes the device `name` (and `port`, where the device
    /// has one) under this list: an empty list names every device.
    pub fn takes(&self, name: &str, port: Option<i32>) -> bool {
        self.names(name, port) != self.exclude
    }

    /// Whether an entry names `name` (and `port`): the list before `^`
    /// turns it round.
    pub fn names(&self, name: &str, port: Option<i32>) -> bool {
        if self.entries.is_empty() {
            return true;
        }
        self.entries.iter().any(|e| self.entry_names(e, name, port))
    }

    /// Whether entry `e` names `name` (and `port`).
    pub fn entry_names(&self, e: &Entry, name: &str, port: Option<i32>) -> bool {
        let named = match self.exact {
            true => name == e.name,
            false => name.starts_with(e.name.as_str()),
        };
        let port_ok = match (e.port, port) {
            (Some(want), Some(have)) => want == have,
            _ => true,
        };
        named && port_ok
    }
}

/// C's `atoi`: the leading digits (after a sign), 0 where there are none.
fn atoi(s: &str) -> i32 {
    let s = s.trim_start();
    let (neg, digits) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let mut n: i64 = 0;
    for c in digits.chars() {
        let Some(d) = c.to_digit(10) else { break };
        n = (n * 10 + i64::from(d)).min(i64::from(i32::MAX) + 1);
    }
    let n = if neg { -n } else { n };
    n.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grammar_is_nccls() {
        let l = List::parse("^=eth0,ib:1,,:7,mlx5_0:2:0:1", IFACES);
        assert!(l.exclude && l.exact);
        let shown: Vec<String> = l.entries.iter().map(|e| e.to_string()).collect();
        assert_eq!(shown, ["eth0", "ib:1", "mlx5_0:2"]);
        // Prefixes, exact names, exclusion.
        let p = |v: &str, n: &str| List::parse(v, IFACES).takes(n, None);
        assert!(p("eth", "eth0") && p("eth,ib", "ib1") && !p("eth", "ib0"));
        assert!(p("=eth0", "eth0") && !p("=eth", "eth0"));
        assert!(!p("^docker,lo", "docker0") && p("^docker,lo", "eth0"));
        // An interface's entry may carry a port, which names no interface.
        assert!(p("eth0:1", "eth0"));
        // A list that names nothing takes everything, and `^` of it nothing.
        assert!(p(",", "eth0") && p("=", "eth0") && !p("^", "eth0"));
        // Ports, as NCCL_IB_HCA gives them.
        let h = List::parse("mlx5_0:1", HCAS);
        assert!(h.takes("mlx5_0", Some(1)) && !h.takes("mlx5_0", Some(2)));
        assert!(List::parse("mlx5:x", HCAS).takes("mlx5_3", Some(0)));
        // At most so many entries.
        let many = vec!["e"; 40].join(",");
        assert_eq!(List::parse(&many, IFACES).entries.len(), 16);
        assert_eq!(List::parse(&many, HCAS).entries.len(), 32);
        assert_eq!(
            List::parse(&"x".repeat(100), IFACES).entries[0].name.len(),
            63
        );
        assert_eq!(
            (atoi("12ab"), atoi("-3"), atoi("x"), atoi("99999999999")),
            (12, -3, 0, i32::MAX)
        );
    }
}
