//! What NCCL does differently from one release to the next, beyond its
//! API: the one table of NCCL's behaviour by release. Every rule of the
//! command (which interfaces NCCL takes, which configuration files count,
//! what its RAS service answers, which plugins it loads) and the smoke test
//! ask here, instead of comparing versions of their own. Each row was read
//! from NCCL's source at the release tags of NVIDIA's repository (the file
//! is named in the row's documentation); the functions and other names of
//! the API are the catalog's ([`crate::api`]), generated from the releases.

use crate::version::Version;

/// A change in what NCCL does, and the first release that does it
/// ([`Change::since`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Change {
    /// NCCL lists only interfaces that are up and attached (`IFF_RUNNING`)
    /// when it looks for a socket interface (`src/misc/socket.cc`); before,
    /// one that is down or has no carrier could be taken.
    RunningInterfacesOnly,
    /// NCCL's default interface rule leaves libvirt's bridges (`virbr*`)
    /// out, and takes them only after `docker*` and `lo`
    /// (`src/misc/socket.cc`); before, `virbr0` counted as a real NIC.
    LibvirtBridgesLast,
    /// `NCCL_CONF_FILE` names the configuration file read instead of
    /// `~/.nccl.conf` (`src/misc/param.cc`).
    ConfFileVariable,
    /// `~` in `~/.nccl.conf` is `HOME`; before, the user database's home
    /// directory (`getpwuid`) (`src/misc/param.cc`).
    HomeFromEnvironment,
    /// A configuration file's line loses a trailing `\r`; before, it stayed
    /// in the value, so a file written on Windows set `eth0\r`
    /// (`src/misc/param.cc`).
    ConfLinesLoseCarriageReturn,
    /// Every process of a job serves NCCL's RAS service (`src/ras/`).
    RasService,
    /// The RAS service takes `SET FORMAT json`; before, it answers `ERROR`
    /// and reads on (`src/ras/client.cc`).
    RasJson,
    /// `NCCL_NET_PLUGIN` is a comma-separated list, each name tried in turn
    /// (`src/plugin/net.cc`).
    NetPluginList,
    /// Tuner plugins (`libnccl-tuner*.so`, `NCCL_TUNER_PLUGIN`).
    TunerPlugins,
    /// Profiler plugins (`libnccl-profiler*.so`, `NCCL_PROFILER_PLUGIN`).
    ProfilerPlugins,
    /// Env plugins (`libnccl-env*.so`, `NCCL_ENV_PLUGIN`).
    EnvPlugins,
    /// GIN plugins (`libnccl-gin*.so`, `NCCL_GIN_PLUGIN`).
    GinPlugins,
    /// RMA plugins (`libnccl-rma*.so`, `NCCL_RMA_PLUGIN`).
    RmaPlugins,
    /// Ranks may share a GPU where `NCCL_MULTI_RANK_GPU_ENABLE=1`; without
    /// it, NCCL refuses them with "… Set NCCL_MULTI_RANK_GPU_ENABLE=1 to
    /// enable this configuration." (before, "Duplicate GPU detected")
    /// (`src/init.cc`, `src/graph/topo.cc`).
    MultiRankGpu,
    /// Without `NCCL_IB_GID_INDEX`, NCCL picks a RoCE v2 GID itself
    /// (`NCCL_IB_ROCE_VERSION_NUM`, `src/transport/net_ib`); before, index 0.
    RoceGidChosen,
    /// 8-bit floats in collectives that do not reduce (all-gather,
    /// broadcast, all-to-all, gather, scatter) on GPUs below compute
    /// capability 9.0; before, NCCL refused every collective in them there
    /// (`src/enqueue.cc`).
    Fp8CopiesBelowSm90,
}

/// The table: each change and the first release with it, oldest first.
const TABLE: [(Change, (u32, u32, u32)); 16] = [
    (Change::TunerPlugins, (2, 19, 1)),
    (Change::RoceGidChosen, (2, 21, 5)),
    (Change::ConfFileVariable, (2, 23, 4)),
    (Change::ProfilerPlugins, (2, 23, 4)),
    (Change::RasService, (2, 24, 3)),
    (Change::NetPluginList, (2, 27, 3)),
    (Change::RunningInterfacesOnly, (2, 28, 3)),
    (Change::LibvirtBridgesLast, (2, 28, 3)),
    (Change::Fp8CopiesBelowSm90, (2, 28, 3)),
    (Change::RasJson, (2, 28, 7)),
    (Change::EnvPlugins, (2, 28, 7)),
    (Change::GinPlugins, (2, 29, 7)),
    (Change::HomeFromEnvironment, (2, 30, 3)),
    (Change::ConfLinesLoseCarriageReturn, (2, 30, 3)),
    (Change::MultiRankGpu, (2, 30, 3)),
    (Change::RmaPlugins, (2, 30, 7)),
];

impl Change {
    /// The first release that does it.
    ///
    /// ```
    /// use nccl_find::explain::Change;
    /// assert_eq!(Change::RunningInterfacesOnly.since().to_string(), "2.28.3");
    /// ```
    pub fn since(self) -> Version {
        let (a, b, c) = self.first();
        Version::new(a, b, c, "")
    }

    /// Whether `release` does it; a release that is not known is taken as
    /// the newest, which does.
    ///
    /// ```
    /// use nccl_find::{explain::Change, Version};
    /// assert!(!Change::LibvirtBridgesLast.in_release(Some(&Version::new(2, 27, 7, ""))));
    /// assert!(Change::LibvirtBridgesLast.in_release(None));
    /// ```
    pub fn in_release(self, release: Option<&Version>) -> bool {
        match release {
            Some(v) => (v.major, v.minor, v.patch) >= self.first(),
            None => true,
        }
    }

    fn first(self) -> (u32, u32, u32) {
        let mut i = 0;
        while i < TABLE.len() {
            if TABLE[i].0 == self {
                return TABLE[i].1;
            }
            i += 1;
        }
        unreachable!("every change has a row: changes::tests")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every change has one row, and the rows run oldest first.
    #[test]
    fn every_change_has_one_row_oldest_first() {
        // A new variant fails to compile here until it is listed, and then
        // this test until it has its row.
        let all = |c: Change| match c {
            Change::RunningInterfacesOnly
            | Change::LibvirtBridgesLast
            | Change::ConfFileVariable
            | Change::HomeFromEnvironment
            | Change::ConfLinesLoseCarriageReturn
            | Change::RasService
            | Change::RasJson
            | Change::NetPluginList
            | Change::TunerPlugins
            | Change::ProfilerPlugins
            | Change::EnvPlugins
            | Change::GinPlugins
            | Change::RmaPlugins
            | Change::MultiRankGpu
            | Change::RoceGidChosen
            | Change::Fp8CopiesBelowSm90 => (),
        };
        for (c, _) in TABLE {
            all(c);
            assert_eq!(TABLE.iter().filter(|(d, _)| *d == c).count(), 1, "{c:?}");
        }
        for w in TABLE.windows(2) {
            assert!(w[0].1 <= w[1].1, "{w:?}");
        }
    }

    #[test]
    fn a_release_has_what_came_at_or_before_it() {
        let v = |a, b, c| Version::new(a, b, c, "");
        assert!(!Change::RasJson.in_release(Some(&v(2, 28, 3))));
        assert!(Change::RasJson.in_release(Some(&v(2, 28, 7))));
        assert!(Change::RasJson.in_release(Some(&v(2, 29, 2))));
        assert!(Change::RasJson.in_release(Some(&v(3, 0, 0))));
        assert!(!Change::RasService.in_release(Some(&v(2, 23, 4))));
        assert_eq!(Change::HomeFromEnvironment.since(), v(2, 30, 3));
    }
}
