#!/usr/bin/env python3
"""The analysis of benchmarks/llama_accuracy.sh for one repetition: reads the
run directories, the /metrics snapshots and the packet capture in WORK and
prints one JSON line."""
import json
import struct
import sys

work, rep, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])


def metric(path, name):
    for line in open(path):
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def packets(path):
    """(time s, source port, destination port, TCP payload) of each IPv4 TCP packet (pcap, loopback)."""
    with open(path, "rb") as f:
        magic, = struct.unpack("<I", f.read(4))
        scale = 1e9 if magic == 0xA1B23C4D else 1e6
        f.read(16)
        linktype, = struct.unpack("<I", f.read(4))
        skip = {1: 14, 113: 16, 276: 20}.get(linktype, 4)
        while True:
            head = f.read(16)
            if len(head) < 16:
                return
            sec, frac, incl, _ = struct.unpack("<IIII", head)
            ip = f.read(incl)[skip:]
            if not ip or ip[0] >> 4 != 4:
                continue
            tcp = ip[(ip[0] & 15) * 4:]
            yield sec + frac / scale, *struct.unpack(">HH", tcp[:4]), tcp[(tcp[12] >> 4) * 4:]


def wire_ttfts():
    """Per client port: (request's first packet, first packet carrying an output token)."""
    conns = {}
    for t, sport, dport, payload in packets(f"{work}/cap.pcap"):
        if not payload:
            continue
        if dport == port:
            conns.setdefault(sport, {"req": t, "tok": None, "buf": b""})
        elif sport == port and dport in conns and conns[dport]["tok"] is None:
            c = conns[dport]
            c["buf"] += payload
            i = c["buf"].find(b'"text":"')
            while i >= 0:
                if c["buf"][i + 8:i + 9] not in (b'"', b""):
                    c["tok"] = t
                    break
                i = c["buf"].find(b'"text":"', i + 1)
    return sorted((c["req"], c["tok"]) for c in conns.values() if c["tok"] is not None)


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))]


plain = [json.loads(l) for l in open(f"{work}/plain/requests.jsonl")]
ok = sorted((r for r in plain if r["outcome"] == "ok"), key=lambda r: r["t_send_ns"])
exact = [json.loads(l) for l in open(f"{work}/exact/requests.jsonl")]
wire = wire_ttfts()
# One request at a time at this load: the n-th connection is the n-th request.
pairs = list(zip(ok, wire)) if len(wire) == len(ok) else []
d_wire = [r["event_offsets_ns"][0] / 1e6 - (tok - req) * 1e3 for r, (req, tok) in pairs]
d_prefill = [r["event_offsets_ns"][0] / 1e6 - r["server_prompt_ms"] for r in ok if "server_prompt_ms" in r]
d_prefill_wire = [(tok - req) * 1e3 - r["server_prompt_ms"] for r, (req, tok) in pairs if "server_prompt_ms" in r]
print(json.dumps({
    "rep": rep,
    "ok": len(ok), "of": len(plain), "wire_connections": len(wire),
    "output_records": sum(r["output_tokens"] for r in ok),
    "output_server": metric(f"{work}/after.txt", "llamacpp:tokens_predicted_total")
    - metric(f"{work}/before.txt", "llamacpp:tokens_predicted_total"),
    "prompt_server": sum(r["prompt_tokens"] for r in ok),
    "prompt_planned": sum(r["prompt_tokens_planned"] for r in ok),
    "exact_prompts": sum(r["outcome"] == "ok" and r["prompt_tokens"] == r["prompt_tokens_planned"] for r in exact),
    "exact_of": len(exact),
    "d_wire_p50": round(pct(d_wire, 0.5), 3) if d_wire else None,
    "d_wire_p90": round(pct(d_wire, 0.9), 3) if d_wire else None,
    "d_prefill_p50": round(pct(d_prefill, 0.5), 3),
    "d_prefill_wire_p50": round(pct(d_prefill_wire, 0.5), 3) if d_prefill_wire else None,
}))
