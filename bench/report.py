#!/usr/bin/python3
"""Turns bench/run.sh's results.jsonl into Markdown tables and PNG charts.

    report.py RESULTS.jsonl OUT.md CHART_DIR
"""
import json
import os
import sys

res_path, out_md, chart_dir = sys.argv[1:4]
rows = [json.loads(l) for l in open(res_path) if l.strip()]
R = {r["tag"]: r.get("result") for r in rows if "result" in r}
E = {r["tag"]: r["error"] for r in rows if "error" in r}
L = {r["tag"]: r.get("load", "") for r in rows}
out = []
w = out.append

m = R.get("machine", {})
w("Machine: %s cores (%s), %s GiB RAM, kernel %s; torch %s, numpy %s, ffcv %s. Load average at "
  "start: %s (each row gives the 1/5/15-minute load average when it ran)." % (
      m.get("cores"), m.get("cpu"), m.get("mem_gib"), m.get("kernel"), m.get("torch"),
      m.get("numpy"), m.get("ffcv"), " ".join(m.get("load", []))))
w("")
memcpy = R.get("memcpy", {}).get("mb_per_s", 0)
w("memcpy bandwidth, 2 threads (numpy copy of 256 MiB, best of 7): **%.0f MB/s**." % memcpy)
w("")

NAMES = {
    "kiln-shards-none": "kiln shards, raw", "kiln-shards-zstd": "kiln shards, zstd:3",
    "kiln-lmdb-none": "kiln LMDB, raw", "kiln-hdf5-none": "kiln HDF5, raw",
    "kiln-shards-none-cold": "kiln shards, raw, cold cache (1 epoch)",
    "dataloader-imagefolder": "DataLoader + ImageFolder (files)",
    "dataloader-memmap": "DataLoader + numpy.memmap", "dataloader-h5py": "DataLoader + h5py",
    "dataloader-lmdb": "DataLoader + python3-lmdb", "ffcv-ndarray": "FFCV Loader, NDArrayField (raw tensors)",
    "ffcv-raw": "FFCV Loader, RGBImageField raw", "ffcv-jpg": "FFCV Loader, RGBImageField JPEG",
}
# ---- full-size photos: medians over the rounds, ratios to the OpenCV full-decode bound.
def _median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2


PHOTO_NAMES = [("kiln-shrink", "kiln pack, shrink-on-load (default), shards raw, 2 threads"),
               ("kiln-exact", "kiln pack --exact-decode, shards raw, 2 threads"),
               ("cv2", "OpenCV imread + INTER_AREA resize + crop, nothing written (full-decode bound), 2 processes"),
               ("pil", "PIL open + convert + bilinear resize + crop, nothing written, 2 processes"),
               ("pil-draft", "PIL with draft (IDCT scaling to 2x the target) + bilinear resize + crop, 2 processes"),
               ("ffcv-raw", "FFCV DatasetWriter, RGB raw (PIL decode + resize), 2 workers"),
               ("ffcv-jpg", "FFCV DatasetWriter, RGB JPEG (PIL decode + resize), 2 workers")]
photo_rates = {}
photo_loads = {}
for tag, r in R.items():
    if tag.startswith("photos/") and r:
        photo_rates.setdefault(tag.split("/")[2], []).append(r.get("images_per_s") or r.get("samples_per_s") or 0)
        photo_loads.setdefault(tag.split("/")[2], []).append(L.get(tag, "").split(" ")[0])
if photo_rates:
    bound = _median(photo_rates.get("cv2", [0]))
    w("### Converter: full-size photos (plasma-workspace-wallpapers) to 3x224x224")
    w("")
    w("| converter | images/s (median) | runs (load average) | / OpenCV full-decode bound |")
    w("| --- | ---: | --- | ---: |")
    for key, name in PHOTO_NAMES:
        errs = [E[t] for t in E if t.startswith("photos/") and t.endswith("/" + key)]
        if key not in photo_rates:
            if errs:
                w("| %s | failed | %s | |" % (name, errs[0].replace("\n", " ").replace("|", "/")[-200:]))
            continue
        xs = photo_rates[key]
        med = _median(xs)
        w("| %s | %.1f | %s | %.2fx |" % (name, med, ", ".join("%.1f (%s)" % (x, l) for x, l in zip(xs, photo_loads[key])),
                                         med / bound if bound else 0))
    w("")

DS = {"fm": "Fashion-MNIST, 70,000 x 1x28x28 uint8", "tiles": "photo tiles, 3x224x224 uint8"}

# ---- tiles and Fashion-MNIST against the fair bound (conv/D/ROUND/TOOL), rounds alternating.
conv_rates = {}
for tag, r in R.items():
    if tag.startswith("conv/") and r:
        _, d, _, tool = tag.split("/")
        conv_rates.setdefault((d, tool), []).append(
            (r.get("images_per_s") or r.get("samples_per_s") or 0, L.get(tag, "")))
CONV_NAMES = [("kiln", "kiln pack, shards raw, 2 threads"),
              ("cv2", "OpenCV imread + INTER_AREA resize + crop, nothing written, 2 processes"),
              ("cv2-write", "the same + each tensor written to one file (os.pwrite), fsync at the end: the fair bound, 2 processes")]
goals = []
for d in ("fm", "tiles"):
    if (d, "kiln") not in conv_rates:
        continue
    fair = _median([x for x, _ in conv_rates.get((d, "cv2-write"), [(0, "")])])
    w("### Converter against the fair bound: %s" % DS[d])
    w("")
    w("| converter | images/s (median) | runs (load average) | kiln / this |")
    w("| --- | ---: | --- | ---: |")
    kiln_med = _median([x for x, _ in conv_rates[(d, "kiln")]])
    rows_ = list(CONV_NAMES) + [("ffcv-raw", "FFCV DatasetWriter, RGB raw (PIL decode), 2 workers"),
                                ("ffcv-jpg", "FFCV DatasetWriter, RGB JPEG (PIL decode), 2 workers")]
    for key, name in rows_:
        if key.startswith("ffcv-"):
            r = R.get("ffcv-write/%s/%s" % (d, key[5:]))
            xs = [(r.get("images_per_s") or r.get("samples_per_s") or 0, L.get("ffcv-write/%s/%s" % (d, key[5:]), ""))] if r else []
        else:
            xs = conv_rates.get((d, key), [])
        if not xs:
            continue
        med = _median([x for x, _ in xs])
        w("| %s | %s | %s | %.2fx |" % (name, format(round(med), ","),
                                       ", ".join("%s (%s)" % (format(round(x), ","), l.split(" ")[0]) for x, l in xs),
                                       kiln_med / med if med else 0))
    w("")
    if fair:
        goals.append(("%s: kiln >= 90%% of the fair bound" % d, "%.0f%%" % (100 * kiln_med / fair), kiln_med >= 0.9 * fair))
if photo_rates and "kiln-shrink" in photo_rates:
    k = _median(photo_rates["kiln-shrink"])
    for key, label, need in (("cv2", "photos: kiln >= 2.5x the OpenCV full-decode bound", 2.5),
                             ("pil-draft", "photos: kiln ahead of PIL with draft", 1.0),
                             ("ffcv-raw", "photos: kiln >= 3x FFCV's writer (raw)", 3.0),
                             ("ffcv-jpg", "photos: kiln >= 3x FFCV's writer (JPEG)", 3.0)):
        if key in photo_rates:
            v = _median(photo_rates[key])
            goals.append((label, "%.2fx" % (k / v), k / v >= need if key != "pil-draft" else k > v))
if goals:
    w("### Converter goals, from the tables above")
    w("")
    w("| goal | measured | met |")
    w("| --- | ---: | --- |")
    for label, v, ok in goals:
        w("| %s | %s | %s |" % (label, v, "yes" if ok else "no"))
    w("")
charts = {}
def _sweep_cell(s):
    """One `kiln bench --sweep` cell: rate (bottleneck), * where too short to compare."""
    return "%s (%s)%s" % (format(round(s.get("samples_per_s") or 0), ","), s.get("bottleneck", "?"),
                          "" if s.get("comparable", True) else " *")


for d in ("fm", "tiles"):
    w("### Reader: %s" % DS[d])
    w("")
    w("| reader | samples/s | MB/s | % of memcpy | kiln shards raw / this | note | load |")
    w("| --- | ---: | ---: | ---: | ---: | --- | --- |")
    base = (R.get("read/%s/kiln-shards-none" % d) or {}).get("samples_per_s", 0)
    chart = []
    for key, name in NAMES.items():
        tag = "read/%s/%s" % (d, key)
        if tag in E:
            w("| %s | failed | | | | %s | |" % (name, E[tag].replace("\n", " ").replace("|", "/")[-200:]))
            continue
        r = R.get(tag)
        if not r:
            continue
        sps, mbs = r["samples_per_s"], r["mb_per_s"]
        note = []
        if r.get("extrapolated"):
            note.append("timed %d samples in %.1f s, epoch extrapolated: %.1f s" % (
                r["samples"], r["seconds"], r["epoch_seconds_estimate"]))
        if "bottleneck" in r:
            note.append("bottleneck: " + r["bottleneck"])
        if key.startswith("ffcv-") and key != "ffcv-ndarray" and d == "fm":
            note.append("RGB 28x28x3 (3x the bytes)")
        w("| %s | %s | %.0f | %.0f%% | %s | %s | %s |" % (
            name, format(round(sps), ","), mbs, 100 * mbs / memcpy if memcpy else 0,
            "%.1fx" % (base / sps) if sps and "cold" not in key and not key.startswith("kiln") else
            ("%.2f" % (base / sps) if sps else ""), "; ".join(note), L.get(tag, "")))
        chart.append((name, sps))
    charts[d] = chart
    sw = R.get("sweep/%s" % d)
    if sw:
        w("")
        rec = sw.get("recommended")
        if rec:
            w("`kiln bench --sweep` on kiln shards raw (2 epochs each): recommended `--threads %d "
              "--prefetch %d`." % (rec["threads"], rec["prefetch"]))
        else:  # null: no cell ran long enough to compare (kiln bench says so)
            w("`kiln bench --sweep` on kiln shards raw (2 epochs each): no recommendation, every "
              "cell was too short to compare (* marks such cells).")
        w("")
        w("| threads | prefetch 1 | prefetch 2 | prefetch 4 | prefetch 8 |")
        w("| --- | ---: | ---: | ---: | ---: |")
        by = {}
        for s in sw["sweep"]:
            by.setdefault(s["threads"], {})[s["prefetch"]] = s
        for t, ps in sorted(by.items()):
            w("| %d | %s |" % (t, " | ".join(_sweep_cell(ps[p]) for p in sorted(ps))))
    w("")
    for f in ("shards-none", "shards-zstd", "lmdb-none", "hdf5-none"):
        r = R.get("read/%s/kiln-%s" % (d, f))
        if r:
            w("- kiln %s verdict: %s" % (f, r.get("verdict", "")))
    r = R.get("read/%s/kiln-shards-none-cold" % d)
    if r:
        w("- kiln shards-none cold (%.0f%% resident at open): %s" % (100 * r["resident_fraction"], r.get("verdict", "")))
    w("")

    w("### Converter: %s" % DS[d])
    w("")
    w("| converter | images/s | kiln pack shards raw / this | output MB | load |")
    w("| --- | ---: | ---: | ---: | --- |")
    pk = (R.get("pack/%s/shards-none" % d) or {}).get("images_per_s", 0)
    conv = [("pack/%s/shards-none" % d, "kiln pack, shards raw"),
            ("pack/%s/shards-zstd" % d, "kiln pack, shards zstd:3"),
            ("pack/%s/lmdb-none" % d, "kiln pack, LMDB raw"),
            ("pack/%s/hdf5-none" % d, "kiln pack, HDF5 raw"),
            ("convert/%s/cv2" % d, "OpenCV decode + resize only (bound), 2 processes"),
            ("convert/%s/pil-h5py" % d, "PIL + h5py script, 2 processes"),
            ("convert/%s/pil-lmdb" % d, "PIL + lmdb script, 2 processes"),
            ("ffcv-write/%s/raw" % d, "FFCV DatasetWriter, RGB raw (PIL decode), 2 workers"),
            ("ffcv-write/%s/jpg" % d, "FFCV DatasetWriter, RGB JPEG (PIL decode), 2 workers"),
            ("ffcv-write/%s/ndarray" % d, "FFCV DatasetWriter, NDArray from tensors (no decode)")]
    cchart = []
    for tag, name in conv:
        if tag in E:
            w("| %s | failed | | | %s |" % (name, E[tag].replace("\n", " ").replace("|", "/")[-200:]))
            continue
        r = R.get(tag)
        if not r:
            continue
        ips = r.get("images_per_s") or r.get("samples_per_s")
        mb = (r.get("output_bytes") or r.get("bytes") or 0) / 1e6
        w("| %s | %s | %.2fx | %s | %s |" % (name, format(round(ips), ","), pk / ips if ips else 0,
                                            "%.1f" % mb if mb else "", L.get(tag, "")))
        cchart.append((name.split(",")[0].split(" (")[0] + ("" if "kiln" not in name else name[len("kiln pack"):]), ips))
    charts[d + "-conv"] = cchart
    w("")
    for f in ("shards-none", "shards-zstd"):
        v = R.get("verify/%s/%s" % (d, f))
        if v:
            w("- `kiln verify --deep` %s: %.0f MB/s against `cat` of the same files %.0f MB/s (%.0f%%)." % (
                f, v["verify_mb_per_s"], v["cat_mb_per_s"], 100 * v["verify_mb_per_s"] / v["cat_mb_per_s"])
              + (" Without the process's start-up (the report's `seconds`): %.0f MB/s (%.0f%%)." % (
                  v["verify_inner_mb_per_s"], 100 * v["verify_inner_mb_per_s"] / v["cat_mb_per_s"])
                 if "verify_inner_mb_per_s" in v else ""))
    w("")

sc = [(int(t.split("/")[1]), R[t]) for t in R if t.startswith("scale/")]
sc.sort()
if sc:
    w("### Scaling: synthetic 28x28x1 raw tensors (kiln shards), threads 2, prefetch 4")
    w("")
    w("| samples | open ms | samples/s | ns per sample | anon RSS MB | file RSS MB | peak RSS MB |")
    w("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for n, r in sc:
        w("| %s | %.2f | %s | %.0f | %.1f | %.1f | %.1f |" % (
            format(n, ","), 1e3 * r["open_seconds"], format(round(r["samples_per_s"]), ","),
            1e9 / r["samples_per_s"], r.get("rss_anon_mb", 0), r.get("rss_file_mb", 0), r["peak_rss_mb"]))
    w("")

open(out_md, "w").write("\n".join(out) + "\n")
print("\n".join(out))

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(chart_dir, exist_ok=True)
    for key, title, xlabel, fname in (
            ("fm", "Reader, Fashion-MNIST 28x28 (batch 256, 2 workers)", "samples/s (log)", "reader_fashion_mnist.png"),
            ("tiles", "Reader, photo tiles 3x224x224 (batch 256, 2 workers)", "samples/s (log)", "reader_tiles.png"),
            ("fm-conv", "Converter, Fashion-MNIST PNGs (2 threads)", "images/s", "converter_fashion_mnist.png"),
            ("tiles-conv", "Converter, 256x256 JPEG tiles (2 threads)", "images/s", "converter_tiles.png")):
        data = charts.get(key)
        if not data:
            continue
        fig, ax = plt.subplots(figsize=(7, 0.32 * len(data) + 1.0), dpi=80)
        names = [n for n, _ in data][::-1]
        vals = [v for _, v in data][::-1]
        ax.barh(names, vals, color=["#c0392b" if n.startswith("kiln") else "#7f8c8d" for n in names])
        if "log" in xlabel:
            ax.set_xscale("log")
        ax.set_xlabel(xlabel)
        ax.set_title(title, fontsize=10)
        ax.tick_params(labelsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(chart_dir, fname))
        plt.close(fig)
    if sc:
        fig, ax = plt.subplots(figsize=(6, 3), dpi=80)
        ax.plot([n for n, _ in sc], [1e9 / r["samples_per_s"] for _, r in sc], "o-", label="ns per sample")
        ax.plot([n for n, _ in sc], [r.get("rss_anon_mb", 0) for _, r in sc], "s-", label="anon RSS MB")
        ax.plot([n for n, _ in sc], [1e3 * r["open_seconds"] for _, r in sc], "^-", label="open ms")
        ax.set_xscale("log")
        ax.set_xlabel("samples in dataset")
        ax.set_title("kiln reader scaling (synthetic 28x28, 2 threads)", fontsize=10)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(chart_dir, "scaling.png"))
        plt.close(fig)
except Exception as e:  # charts are optional
    print("charts failed: %r" % e, file=sys.stderr)
