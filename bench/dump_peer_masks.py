"""Writes the peers' random masks (bigbird, document) as raw bytes, S*S uint8 each, so that
stof's benchmark runs the very same masks (bench_attention --peer-masks DIR).

  python3 bench/dump_peer_masks.py PEERS_PY DIR S [S ...]
"""
import importlib.util, os, sys

def main():
    peers_py, out, sizes = sys.argv[1], sys.argv[2], [int(s) for s in sys.argv[3:]]
    spec = importlib.util.spec_from_file_location("peers", peers_py)
    peers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(peers)
    os.makedirs(out, exist_ok=True)
    for S in sizes:
        mods = peers.suite(S, "cpu")
        for name in ("bigbird", "document"):
            m = peers.dense_bool(mods[name], S, "cpu").to("cpu").numpy().astype("uint8")
            m.tofile(os.path.join(out, f"{name}_{S}.u8"))
            print(f"{name} S={S} density={m.mean():.4f}")

if __name__ == "__main__":
    main()
