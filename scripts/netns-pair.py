"""Two emulated nodes on one machine, without `ip`: network namespaces
nf-a and nf-b joined by a veth pair (eth0, 10.231.9.1 and .2/24), each with
an `ib0` veth (10.98.0.1 and .2/24) whose peer sits alone in the root
namespace, up but bridged to nothing: NCCL's default rule takes ib* first,
and it leads nowhere. `python3 netns-pair.py up|down`."""
import sys
from pyroute2 import IPRoute, NetNS, netns

NODES = {"a": 1, "b": 2}


def down():
    for h in NODES:
        if f"nf-{h}" in netns.listnetns():
            netns.remove(f"nf-{h}")
    with IPRoute() as ipr:
        for name in ("nfa-ibp", "nfb-ibp", "nfa-eth"):
            for i in ipr.link_lookup(ifname=name):
                ipr.link("del", index=i)


def into(ipr, name, ns, new, addr):
    i = ipr.link_lookup(ifname=name)[0]
    ipr.link("set", index=i, net_ns_fd=ns)
    with NetNS(ns) as n:
        j = n.link_lookup(ifname=name)[0]
        n.link("set", index=j, ifname=new)
        n.addr("add", index=j, address=addr, prefixlen=24)
        n.link("set", index=j, state="up")
        lo = n.link_lookup(ifname="lo")[0]
        n.link("set", index=lo, state="up")


def up():
    down()
    for h in NODES:
        netns.create(f"nf-{h}")
    with IPRoute() as ipr:
        ipr.link("add", ifname="nfa-eth", kind="veth", peer="nfb-eth")
        into(ipr, "nfa-eth", "nf-a", "eth0", "10.231.9.1")
        into(ipr, "nfb-eth", "nf-b", "eth0", "10.231.9.2")
        for h, n in NODES.items():
            ipr.link("add", ifname=f"nf{h}-ib", kind="veth", peer=f"nf{h}-ibp")
            into(ipr, f"nf{h}-ib", f"nf-{h}", "ib0", f"10.98.0.{n}")
            p = ipr.link_lookup(ifname=f"nf{h}-ibp")[0]
            ipr.link("set", index=p, state="up")


{"up": up, "down": down}[sys.argv[1]]()
