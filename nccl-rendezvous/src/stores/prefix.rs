//! c10d's `PrefixStore`: any store of c10d's shape ([`Store`]: set, get,
//! add, check, wait), with every key under a prefix. A run of the smoke
//! test in torchrun's agent store meets under `/nccl-find/RUN/RESTART/N/`,
//! so that torch's own keys, another job's and an earlier run's are never
//! read.

use std::time::Instant;

/// A key-value store of c10d's shape, as one client sees it. Every call
/// ends by `until`.
pub(crate) trait Store {
    /// Why a call failed.
    type Error;
    /// Sets `key` to `value`.
    fn set(&mut self, key: &str, value: &[u8], until: Instant) -> Result<(), Self::Error>;
    /// `key`'s value.
    fn get(&mut self, key: &str, until: Instant) -> Result<Vec<u8>, Self::Error>;
    /// Adds `n` to the counter `key`: its new value.
    fn add(&mut self, key: &str, n: i64, until: Instant) -> Result<i64, Self::Error>;
    /// Whether every one of `keys` exists.
    fn check(&mut self, keys: &[String], until: Instant) -> Result<bool, Self::Error>;
    /// Whether each of `keys` exists.
    fn check_each(&mut self, keys: &[String], until: Instant) -> Result<Vec<bool>, Self::Error>;
    /// Returns once every one of `keys` exists.
    fn wait(&mut self, keys: &[String], until: Instant) -> Result<(), Self::Error>;
}

/// `inner` with every key under `prefix`.
pub(crate) struct PrefixStore<S> {
    /// The store itself (for what is not about keys: its connection).
    pub(crate) inner: S,
    prefix: String,
}

impl<S> PrefixStore<S> {
    /// `inner`, its keys under `prefix`.
    pub(crate) fn new(inner: S, prefix: &str) -> Self {
        PrefixStore {
            inner,
            prefix: prefix.to_string(),
        }
    }

    /// The prefix every key goes under.
    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Moves every later key further down, under `more`.
    pub(crate) fn descend(&mut self, more: &str) {
        self.prefix.push_str(more);
    }

    fn key(&self, k: &str) -> String {
        format!("{}{k}", self.prefix)
    }

    fn keys(&self, ks: &[String]) -> Vec<String> {
        let mut out = Vec::with_capacity(ks.len());
        for k in ks {
            out.push(self.key(k));
        }
        out
    }
}

impl<S: Store> Store for PrefixStore<S> {
    type Error = S::Error;
    fn set(&mut self, key: &str, value: &[u8], until: Instant) -> Result<(), S::Error> {
        let k = self.key(key);
        self.inner.set(&k, value, until)
    }
    fn get(&mut self, key: &str, until: Instant) -> Result<Vec<u8>, S::Error> {
        let k = self.key(key);
        self.inner.get(&k, until)
    }
    fn add(&mut self, key: &str, n: i64, until: Instant) -> Result<i64, S::Error> {
        let k = self.key(key);
        self.inner.add(&k, n, until)
    }
    fn check(&mut self, keys: &[String], until: Instant) -> Result<bool, S::Error> {
        let ks = self.keys(keys);
        self.inner.check(&ks, until)
    }
    fn check_each(&mut self, keys: &[String], until: Instant) -> Result<Vec<bool>, S::Error> {
        let ks = self.keys(keys);
        self.inner.check_each(&ks, until)
    }
    fn wait(&mut self, keys: &[String], until: Instant) -> Result<(), S::Error> {
        let ks = self.keys(keys);
        self.inner.wait(&ks, until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A store in memory that records the keys it was given.
    #[derive(Default)]
    struct Mem {
        map: BTreeMap<String, Vec<u8>>,
        seen: Vec<String>,
    }

    impl Store for Mem {
        type Error = String;
        fn set(&mut self, key: &str, value: &[u8], _: Instant) -> Result<(), String> {
            self.seen.push(key.to_string());
            self.map.insert(key.to_string(), value.to_vec());
            Ok(())
        }
        fn get(&mut self, key: &str, _: Instant) -> Result<Vec<u8>, String> {
            self.seen.push(key.to_string());
            self.map.get(key).cloned().ok_or(format!("no {key}"))
        }
        fn add(&mut self, key: &str, n: i64, _: Instant) -> Result<i64, String> {
            self.seen.push(key.to_string());
            let v = self.map.get(key).map_or(0, |v| v.len() as i64) + n;
            self.map.insert(key.to_string(), vec![0; v as usize]);
            Ok(v)
        }
        fn check(&mut self, keys: &[String], _: Instant) -> Result<bool, String> {
            self.seen.extend(keys.iter().cloned());
            Ok(keys.iter().all(|k| self.map.contains_key(k)))
        }
        fn check_each(&mut self, keys: &[String], _: Instant) -> Result<Vec<bool>, String> {
            self.seen.extend(keys.iter().cloned());
            Ok(keys.iter().map(|k| self.map.contains_key(k)).collect())
        }
        fn wait(&mut self, keys: &[String], t: Instant) -> Result<(), String> {
            match self.check(keys, t)? {
                true => Ok(()),
                false => Err("never".into()),
            }
        }
    }

    #[test]
    fn every_key_goes_under_the_prefix_and_deeper_after_descend() {
        let t = Instant::now();
        let mut s = PrefixStore::new(Mem::default(), "/nccl-find/run/0/");
        s.set("hello/1", b"x", t).unwrap();
        assert_eq!(s.add("runs/1", 2, t), Ok(2));
        assert_eq!(s.check(&["hello/1".into()], t), Ok(true));
        s.descend("2/");
        assert_eq!(s.prefix(), "/nccl-find/run/0/2/");
        assert_eq!(
            s.check_each(&["hello/1".into(), "a".into()], t),
            Ok(vec![false, false])
        );
        assert_eq!(
            s.get("hello/1", t),
            Err("no /nccl-find/run/0/2/hello/1".into())
        );
        assert_eq!(
            s.inner.seen,
            [
                "/nccl-find/run/0/hello/1",
                "/nccl-find/run/0/runs/1",
                "/nccl-find/run/0/hello/1",
                "/nccl-find/run/0/2/hello/1",
                "/nccl-find/run/0/2/a",
                "/nccl-find/run/0/2/hello/1",
            ]
        );
        // Two prefixes over one store never see each other's keys.
        let mut a = PrefixStore::new(s.inner, "a/");
        a.set("k", b"1", t).unwrap();
        let mut b = PrefixStore::new(a.inner, "b/");
        assert_eq!(b.check(&["k".into()], t), Ok(false));
        assert_eq!(b.wait(&["k".into()], t), Err("never".into()));
    }
}
