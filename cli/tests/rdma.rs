//! doctor's RDMA and network-plugin findings, each from a host-facts
//! fixture: the healthy host's facts with its RDMA hardware replaced. Each
//! case asserts the exact finding, its level, and the exit status.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

fn golden(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

/// doctor on the dpkg fixture with the healthy facts, `hw` as the RDMA
/// hardware and `env` as the NCCL variables: (exit status, report).
fn doctor(tag: &str, hw: Value, env: &[(&str, &str)]) -> (i32, String) {
    doctor_on(tag, hw, env, None)
}

/// `doctor`, with the NCCL at `nccl_home` (a real library) instead of the
/// dpkg fixture where one is given.
fn doctor_on(
    tag: &str,
    hw: Value,
    env: &[(&str, &str)],
    nccl_home: Option<&Path>,
) -> (i32, String) {
    let mut facts: Value =
        serde_json::from_str(&std::fs::read_to_string(golden("facts-healthy.json")).unwrap())
            .unwrap();
    facts["rdma_hardware"] = hw;
    let mut vars = serde_json::Map::new();
    vars.insert("NCCL_DEBUG".into(), json!("WARN"));
    for (k, v) in env {
        vars.insert(k.to_string(), json!(v));
    }
    facts["env"] = Value::Object(vars);
    let file = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("rdma-{tag}-{}.json", std::process::id()));
    std::fs::write(&file, facts.to_string()).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nccl-find"));
    cmd.arg("doctor").env_clear();
    match nccl_home {
        Some(home) => cmd.env("NCCL_HOME", home),
        None => cmd
            .arg("--root")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/trees/dpkg")),
    };
    let out = cmd
        .arg("--host-facts")
        .arg(&file)
        .env("TARGET", "x86_64-unknown-linux-gnu")
        .output()
        .unwrap();
    std::fs::remove_file(&file).unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn port(num: u32, state: &str, phys: &str, layer: &str, gids: &[(u32, &str)]) -> Value {
    json!({
        "port": num, "state": state, "phys_state": phys, "rate": "100 Gb/sec (4X EDR)", "link_layer": layer,
        "gids": gids.iter().map(|(i, t)| json!({"index": i, "type": t})).collect::<Vec<_>>(),
    })
}

/// An InfiniBand host: two adapters, device nodes, unlimited locked memory,
/// nvidia_peermem loaded; `second` is the state of mlx5_1's port.
fn ib_host(second: (&str, &str)) -> Value {
    json!({
        "adapters": [
            {"name": "mlx5_0", "ports": [port(1, "ACTIVE", "LinkUp", "InfiniBand", &[(0, "IB/RoCE v1")])]},
            {"name": "mlx5_1", "ports": [port(1, second.0, second.1, "InfiniBand", &[])]},
        ],
        "uverbs": ["uverbs0", "uverbs1"],
        "memlock": "unlimited",
        "peermem": "nvidia_peermem",
        "net_plugins": [],
    })
}

fn has(report: &str, line: &str) {
    assert!(report.contains(line), "missing:\n{line}\nin:\n{report}");
}

#[test]
fn an_infiniband_host_with_one_port_down() {
    let (code, r) = doctor("ib", ib_host(("DOWN", "Disabled")), &[]);
    assert_eq!(code, 0, "{r}");
    has(
        &r,
        "  ok       mlx5_0: port 1 ACTIVE (LinkUp), 100 Gb/sec (4X EDR), InfiniBand\n",
    );
    has(
        &r,
        "  ok       mlx5_1: port 1 DOWN (Disabled), 100 Gb/sec (4X EDR), InfiniBand\n",
    );
    has(&r, "  note     some RDMA ports are down: mlx5_1 port 1 (DOWN, Disabled): NCCL uses the ACTIVE ones\n");
    has(&r, "  ok       locked memory (RLIMIT_MEMLOCK): unlimited\n");
    has(&r, "  ok       nvidia_peermem is loaded: GPUDirect RDMA can move data between GPUs and adapters directly (NCCL_NET_GDR_LEVEL decides when)\n");
    has(&r, "  ok       no network plugin (libnccl-net.so) on the loader's path: NCCL uses its internal transports\n");
    // Every port down: a problem, naming them.
    let mut hw = ib_host(("DOWN", "Polling"));
    hw["adapters"][0]["ports"][0]["state"] = json!("DOWN");
    hw["adapters"][0]["ports"][0]["phys_state"] = json!("Disabled");
    let (code, r) = doctor("ib-down", hw, &[]);
    assert_eq!(code, 1, "{r}");
    has(&r, "  problem  every RDMA port is down: mlx5_0 port 1 (DOWN, Disabled), mlx5_1 port 1 (DOWN, Polling): NCCL cannot use InfiniBand/RoCE and falls back to sockets\n           fix: check the cables and the switch (ibstat, ibv_devinfo), or NCCL_IB_DISABLE=1\n");
}

#[test]
fn a_roce_host_with_v1_and_v2_gids() {
    let gids = [
        (0, "IB/RoCE v1"),
        (1, "RoCE v2"),
        (2, "IB/RoCE v1"),
        (3, "RoCE v2"),
    ];
    let mut hw = ib_host(("ACTIVE", "LinkUp"));
    hw["adapters"] =
        json!([{"name": "mlx5_0", "ports": [port(1, "ACTIVE", "LinkUp", "Ethernet", &gids)]}]);
    let (code, r) = doctor("roce", hw.clone(), &[]);
    assert_eq!(code, 0, "{r}");
    has(
        &r,
        "  ok       mlx5_0: port 1 ACTIVE (LinkUp), 100 Gb/sec (4X EDR), Ethernet (RoCE)\n",
    );
    has(&r, "  note     RoCE: NCCL_IB_GID_INDEX is unset: NCCL 2.28.3 picks a RoCE v2 GID itself; the RoCE v2 GID indexes here are mlx5_0 port 1: 1, 3\n");
    // Before 2.21.5 NCCL takes index 0, a v1 GID here: set it.
    if let Some(w) = common::wheels() {
        let old = w.join("nvidia_nccl_cu11-2.13.4/nvidia/nccl");
        let (code, r) = doctor_on("roce-old", hw.clone(), &[], Some(&old));
        assert_eq!(code, 0, "{r}");
        has(&r, "  note     RoCE: NCCL_IB_GID_INDEX is unset: NCCL 2.13.4 takes GID index 0 (it picks a RoCE v2 GID itself from 2.21.5); the RoCE v2 GID indexes here are mlx5_0 port 1: 1, 3\n           fix: set NCCL_IB_GID_INDEX to one of them, the same on every node\n");
    }
    let (code, r) = doctor("roce-v1", hw.clone(), &[("NCCL_IB_GID_INDEX", "2")]);
    assert_eq!(code, 1, "{r}");
    has(&r, "  problem  RoCE: NCCL_IB_GID_INDEX=2 is IB/RoCE v1 on mlx5_0 port 1, not RoCE v2; the RoCE v2 GID indexes here are mlx5_0 port 1: 1, 3\n");
    let (code, r) = doctor("roce-none", hw.clone(), &[("NCCL_IB_GID_INDEX", "7")]);
    assert_eq!(code, 1, "{r}");
    has(
        &r,
        "  problem  RoCE: NCCL_IB_GID_INDEX=7 names no GID in use, not RoCE v2;",
    );
    let (code, r) = doctor("roce-v2", hw, &[("NCCL_IB_GID_INDEX", "3")]);
    assert_eq!(code, 0, "{r}");
    has(
        &r,
        "  ok       RoCE: NCCL_IB_GID_INDEX=3 is a RoCE v2 GID\n",
    );
}

#[test]
fn a_container_without_device_nodes_and_with_dockers_memlock() {
    let mut hw = ib_host(("ACTIVE", "LinkUp"));
    hw["uverbs"] = json!([]);
    hw["memlock"] = json!(65536);
    hw["peermem"] = Value::Null;
    let (code, r) = doctor("container", hw, &[]);
    assert_eq!(code, 1, "{r}");
    has(&r, "  problem  the adapters are in /sys/class/infiniband, but /dev/infiniband has no uverbs device: a container started without the RDMA devices, and NCCL cannot open the adapters\n           fix: docker run --device=/dev/infiniband (or --privileged); on Kubernetes, an RDMA device plugin\n");
    has(&r, "  problem  the locked-memory limit (RLIMIT_MEMLOCK) is 64 KiB: NCCL's memory registration with the adapter fails (`ibv_reg_mr`), and NCCL reports `unhandled system error`\n           fix: docker run --ulimit memlock=-1; or in /etc/security/limits.conf: * soft memlock unlimited and * hard memlock unlimited\n");
    has(&r, "  note     nvidia_peermem is not loaded:");
}

#[test]
fn libraries_but_no_adapter_is_a_note_and_a_healthy_exit() {
    let hw = json!({"adapters": [], "uverbs": [], "memlock": "unlimited", "peermem": null, "net_plugins": []});
    let (code, r) = doctor("none", hw, &[]);
    assert_eq!(code, 0, "{r}");
    has(&r, "  note     libibverbs, libmlx5 and librdmacm load, but there is no InfiniBand or RoCE adapter (/sys/class/infiniband is empty): NCCL will use TCP sockets between nodes\n");
    assert!(!r.contains("can be used"), "{r}");
}

#[test]
fn an_efa_style_plugin_on_the_loader_path() {
    let mut hw = ib_host(("ACTIVE", "LinkUp"));
    hw["net_plugins"] = json!([
        {"path": "/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so", "version": "1.9.1"},
        {"path": "/usr/lib/x86_64-linux-gnu/libnccl-net.so", "version": null},
    ]);
    let (code, r) = doctor("plugin-ofi", hw.clone(), &[("NCCL_NET_PLUGIN", "ofi")]);
    assert_eq!(code, 0, "{r}");
    has(&r, "  ok       NCCL loads the network plugin /opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so (version 1.9.1)\n");
    let (code, r) = doctor(
        "plugin-missing",
        hw.clone(),
        &[("NCCL_NET_PLUGIN", "aws-ofi")],
    );
    assert_eq!(code, 1, "{r}");
    has(&r, "  problem  NCCL_NET_PLUGIN=aws-ofi names libnccl-net-aws-ofi.so, which is not on the loader's path: NCCL falls back to its internal transports, and the fabric the plugin drives (EFA, for one) is not used\n");
    let (code, r) = doctor("plugin-default", hw.clone(), &[]);
    assert_eq!(code, 0, "{r}");
    has(&r, "  note     NCCL will load the network plugin /usr/lib/x86_64-linux-gnu/libnccl-net.so: it replaces NCCL's internal InfiniBand and socket transports\n           fix: NCCL_NET_PLUGIN=none if it is not wanted\n");
    let (code, r) = doctor("plugin-none", hw, &[("NCCL_NET_PLUGIN", "none")]);
    assert_eq!(code, 0, "{r}");
    has(&r, "  note     NCCL_NET_PLUGIN=none: NCCL uses its internal transports (InfiniBand verbs, sockets)\n");
}

/// NCCL_NET_PLUGIN is a comma list (2.27.3 on), each name tried in turn;
/// and the five other families (GIN, RMA, tuner, profiler, env) are found
/// by the same rule, each by its variable.
#[test]
fn every_plugin_family_by_nccls_rule() {
    let mut hw = ib_host(("ACTIVE", "LinkUp"));
    hw["plugins"] = json!([
        {"path": "/opt/aws/lib/libnccl-net-aws.so", "version": null},
        {"path": "/usr/lib/x86_64-linux-gnu/libnccl-tuner.so", "version": "2.1"},
        {"path": "/opt/p/libnccl-profiler-inspector.so", "version": null},
    ]);
    let (code, r) = doctor("net-list", hw.clone(), &[("NCCL_NET_PLUGIN", "ofi,aws")]);
    assert_eq!(code, 0, "{r}");
    has(
        &r,
        "  ok       NCCL loads the network plugin /opt/aws/lib/libnccl-net-aws.so\n",
    );
    // The tuner is loaded by its default name; the profiler by its own.
    has(&r, "  note     NCCL will load the tuner plugin /usr/lib/x86_64-linux-gnu/libnccl-tuner.so (version 2.1)\n           fix: NCCL_TUNER_PLUGIN=none if it is not wanted\n");
    assert!(!r.contains("profiler plugin"), "{r}");
    let (code, r) = doctor(
        "profiler",
        hw.clone(),
        &[
            ("NCCL_PROFILER_PLUGIN", "inspector"),
            ("NCCL_TUNER_PLUGIN", "none"),
        ],
    );
    assert_eq!(code, 0, "{r}");
    has(
        &r,
        "  note     NCCL will load the profiler plugin /opt/p/libnccl-profiler-inspector.so\n",
    );
    assert!(!r.contains("tuner plugin"), "{r}");
    let (code, r) = doctor(
        "tuner-missing",
        hw.clone(),
        &[("NCCL_TUNER_PLUGIN", "mine")],
    );
    assert_eq!(code, 1, "{r}");
    has(&r, "  problem  NCCL_TUNER_PLUGIN=mine names libnccl-tuner-mine.so, which is not on the loader's path: NCCL runs without a tuner plugin\n");
    // GIN plugins came in 2.29.7 (the table of releases): the fixture's
    // NCCL 2.28.3 loads none, whatever is set.
    let (code, r) = doctor("gin-unread", hw.clone(), &[("NCCL_GIN_PLUGIN", "mine")]);
    assert_eq!(code, 0, "{r}");
    has(&r, "  note     NCCL_GIN_PLUGIN=mine is not used: NCCL 2.28.3 loads no gin plugin (its library never reads NCCL_GIN_PLUGIN)\n");
    let (code, r) = doctor("static", hw, &[("NCCL_NET_PLUGIN", "STATIC_PLUGIN")]);
    assert_eq!(code, 0, "{r}");
    has(&r, "  note     NCCL_NET_PLUGIN names STATIC_PLUGIN: NCCL looks for a plugin linked into the program itself\n");
}

/// Which families the NCCL that runs has comes from its library: a real
/// 2.21.5 reads NCCL_NET_PLUGIN and NCCL_TUNER_PLUGIN only, so a GIN plugin
/// file and a profiler setting are named as unused, and the tuner loads.
#[test]
fn plugin_families_follow_the_nccl_that_runs() {
    let Some(w) = common::wheels() else { return };
    let mut hw = ib_host(("ACTIVE", "LinkUp"));
    hw["plugins"] = json!([
        {"path": "/usr/lib/x86_64-linux-gnu/libnccl-tuner.so", "version": null},
        {"path": "/usr/lib/x86_64-linux-gnu/libnccl-gin.so", "version": "1.0"},
    ]);
    let env = [("NCCL_PROFILER_PLUGIN", "inspector")];
    let old = Path::new(&w).join("nvidia_nccl_cu12-2.21.5/nvidia/nccl");
    let (code, r) = doctor_on("families-old", hw.clone(), &env, Some(&old));
    assert_eq!(code, 0, "{r}");
    has(
        &r,
        "  note     NCCL will load the tuner plugin /usr/lib/x86_64-linux-gnu/libnccl-tuner.so\n",
    );
    has(&r, "  note     /usr/lib/x86_64-linux-gnu/libnccl-gin.so (version 1.0) is not used: NCCL 2.21.5 loads no gin plugin (its library never reads NCCL_GIN_PLUGIN)\n");
    has(&r, "  note     NCCL_PROFILER_PLUGIN=inspector is not used: NCCL 2.21.5 loads no profiler plugin (its library never reads NCCL_PROFILER_PLUGIN)\n");
    // The newest release has every family: the same host loads the GIN
    // plugin, and the missing profiler is a problem.
    let new = Path::new(&w).join("nvidia_nccl_cu12-2.32.3/nvidia/nccl");
    let (code, r) = doctor_on("families-new", hw, &env, Some(&new));
    assert_eq!(code, 1, "{r}");
    has(&r, "  note     NCCL will load the gin plugin /usr/lib/x86_64-linux-gnu/libnccl-gin.so (version 1.0)\n");
    has(&r, "  problem  NCCL_PROFILER_PLUGIN=inspector names libnccl-profiler-inspector.so, which is not on the loader's path: NCCL runs without a profiler plugin\n");
}

#[test]
fn nccl_ib_hca_in_each_of_its_syntaxes() {
    let hw = ib_host(("ACTIVE", "LinkUp"));
    let fix = "           fix: name one of: mlx5_0 (port 1), mlx5_1 (port 1)\n";
    for (v, want) in [
        ("mlx5", None),
        ("mlx5_0", None),
        ("mlx5_0:1,mlx5_1:1", None),
        ("^=mlx5_0", None),
        ("=mlx5", Some((1, "  problem  NCCL_IB_HCA==mlx5: mlx5 names no adapter port here, so NCCL finds no adapter and falls back to sockets\n"))),
        ("mlx5_9", Some((1, "  problem  NCCL_IB_HCA=mlx5_9: mlx5_9 names no adapter port here, so NCCL finds no adapter and falls back to sockets\n"))),
        ("mlx5_0:2", Some((1, "  problem  NCCL_IB_HCA=mlx5_0:2: mlx5_0:2 names no adapter port here, so NCCL finds no adapter and falls back to sockets\n"))),
        ("mlx5_0:1,mlx5_7", Some((0, "  note     NCCL_IB_HCA=mlx5_0:1,mlx5_7: mlx5_7 names no adapter port here\n"))),
        ("^mlx5", Some((1, "  problem  NCCL_IB_HCA=^mlx5 excludes every adapter here: NCCL falls back to sockets\n"))),
    ] {
        let (code, r) = doctor("hca", hw.clone(), &[("NCCL_IB_HCA", v)]);
        match want {
            None => {
                assert_eq!(code, 0, "{v}: {r}");
                assert!(!r.contains(&format!("NCCL_IB_HCA={v}:")), "{v}: {r}");
                assert!(!r.contains("excludes every adapter"), "{v}: {r}");
            }
            Some((c, line)) => {
                assert_eq!(code, c, "{v}: {r}");
                has(&r, &format!("{line}{fix}"));
            }
        }
    }
}

#[test]
fn doctor_json_carries_the_adapter_facts() {
    let mut facts: Value =
        serde_json::from_str(&std::fs::read_to_string(golden("facts-healthy.json")).unwrap())
            .unwrap();
    facts["rdma_hardware"] = ib_host(("DOWN", "Disabled"));
    facts["env"] = json!({});
    let file = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("rdma-json-{}.json", std::process::id()));
    std::fs::write(&file, facts.to_string()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nccl-find"))
        .args(["doctor", "--json", "--root"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/trees/dpkg"))
        .arg("--host-facts")
        .arg(&file)
        .env_clear()
        .output()
        .unwrap();
    std::fs::remove_file(&file).unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    // Written as `plugins` (every family); a facts file's `net_plugins`
    // (written before) is still read.
    let mut want = ib_host(("DOWN", "Disabled"));
    let old = want.as_object_mut().unwrap().remove("net_plugins").unwrap();
    want["plugins"] = old;
    assert_eq!(v["facts"]["rdma_hardware"], want);
}
