"""Two emulated nodes on one machine, without `ip`: network namespaces
nf-a and nf-b joined by a veth pair (eth0, 10.231.9.1 and .2/24), each with
an `ib0` veth (10.98.0.1 and .2/24) whose peer sits alone in the root
namespace, up but bridged to nothing: NCCL's default rule takes ib* first,
and it leads nowhere. `python3 netns-pair.py up [N]|down`: with N above 2,
nodes nf-a, nf-b, nf-c, ... (10.231.9.1, .2, .3, ...) each join a bridge
(nfbr) in the root namespace through their eth0 instead."""
import sys
from pyroute2 import IPRoute, NetNS, netns

NODES = {"a": 1, "b": 2}
MORE = "cdefgh"


def down():
    for h in "ab" + MORE:
        if f"nf-{h}" in netns.listnetns():
            netns.remove(f"nf-{h}")
    with IPRoute() as ipr:
        names = ["nfa-ibp", "nfb-ibp", "nfa-eth", "nfbr"]
        names += [f"nf{h}-ibp" for h in MORE] + [f"nf{h}-brp" for h in "ab" + MORE]
        for name in names:
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


def up(count=2):
    down()
    if count > 2:
        NODES.update({h: i + 3 for i, h in enumerate(MORE[: count - 2])})
    for h in NODES:
        netns.create(f"nf-{h}")
    with IPRoute() as ipr:
        if count > 2:
            ipr.link("add", ifname="nfbr", kind="bridge")
            br = ipr.link_lookup(ifname="nfbr")[0]
            ipr.link("set", index=br, state="up")
            for h, n in NODES.items():
                ipr.link("add", ifname=f"nf{h}-br", kind="veth", peer=f"nf{h}-brp")
                into(ipr, f"nf{h}-br", f"nf-{h}", "eth0", f"10.231.9.{n}")
                p = ipr.link_lookup(ifname=f"nf{h}-brp")[0]
                ipr.link("set", index=p, master=br, state="up")
        else:
            ipr.link("add", ifname="nfa-eth", kind="veth", peer="nfb-eth")
            into(ipr, "nfa-eth", "nf-a", "eth0", "10.231.9.1")
            into(ipr, "nfb-eth", "nf-b", "eth0", "10.231.9.2")
        for h, n in NODES.items():
            ipr.link("add", ifname=f"nf{h}-ib", kind="veth", peer=f"nf{h}-ibp")
            into(ipr, f"nf{h}-ib", f"nf-{h}", "ib0", f"10.98.0.{n}")
            p = ipr.link_lookup(ifname=f"nf{h}-ibp")[0]
            ipr.link("set", index=p, state="up")


if sys.argv[1] == "up":
    up(int(sys.argv[2]) if len(sys.argv) > 2 else 2)
else:
    down()
