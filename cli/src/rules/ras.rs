//! NCCL's RAS service as the NCCL that runs has it (`src/ras/` of its
//! source): whether it answers at all (every process of a job serves it,
//! from 2.24.3, unless `NCCL_RAS_ENABLE=0`), where (`NCCL_RAS_ADDR`,
//! `localhost:28028` by default), what may see it (anyone who reaches the
//! address), and which questions it takes (`SET FORMAT json` from 2.28.7;
//! before, it answers `ERROR` and the report comes as text).

use nccl_find::explain::Change;
use nccl_find::Version;

/// Where NCCL's RAS service listens unless `NCCL_RAS_ADDR` says otherwise.
pub const DEFAULT_HOST: &str = "localhost";
pub const DEFAULT_PORT: u16 = 28028;

/// `HOST:PORT` (as `NCCL_RAS_ADDR` gives it, an IPv6 host in brackets) as
/// its host, brackets taken off, and its port where it names one.
pub fn split_addr(addr: &str) -> (&str, Option<u16>) {
    match addr.rsplit_once(':') {
        Some((h, p)) if p.parse::<u16>().is_ok() => (
            h.trim_start_matches('[').trim_end_matches(']'),
            p.parse().ok(),
        ),
        _ => (addr.trim_start_matches('[').trim_end_matches(']'), None),
    }
}

/// NCCL reads `NCCL_RAS_ENABLE` as a number: 0 turns the service off.
pub fn turned_off(v: Option<&str>) -> bool {
    v.is_some_and(|v| v.trim().parse::<i64>() == Ok(0))
}

/// Whether NCCL's RAS service at `addr` (`NCCL_RAS_ADDR`'s `HOST:PORT`)
/// listens beyond this host: any host but `localhost` and the loopback
/// addresses (`0.0.0.0` is every interface).
pub fn listens_beyond_this_host(addr: &str) -> bool {
    let (host, _) = split_addr(addr);
    if host.eq_ignore_ascii_case("localhost") {
        return false;
    }
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => !ip.is_loopback(),
        Err(_) => true,
    }
}

/// The first release that serves it (`2.24.3`), for messages.
pub fn first_release() -> Version {
    Change::RasService.since()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loopback_address_stays_on_this_host() {
        for a in [
            "localhost:28028",
            "127.0.0.1:28028",
            "[::1]:28028",
            "127.1.2.3:1",
            "LOCALHOST:9",
        ] {
            assert!(!listens_beyond_this_host(a), "{a}");
        }
        for a in [
            "0.0.0.0:28028",
            "10.0.0.5:28028",
            "node7:28028",
            "[::]:28028",
            "[fe80::1]:28028",
        ] {
            assert!(listens_beyond_this_host(a), "{a}");
        }
        assert!(turned_off(Some("0")) && turned_off(Some(" 0")) && !turned_off(Some("1")));
        assert!(!turned_off(Some("no")) && !turned_off(None));
        assert_eq!(split_addr("[::1]:28028"), ("::1", Some(28028)));
        assert_eq!(split_addr("node7"), ("node7", None));
    }

    #[test]
    fn the_first_release_that_serves_it() {
        assert_eq!(first_release().to_string(), "2.24.3");
    }
}
