#!/usr/bin/env python3
"""Reads TensorBoard event files with the tensorboard package's own reader (test only).

Prints every scalar in DIR as JSON, {tag: [[step, value], ...]}, through
tensorboard.backend.event_processing.event_accumulator.EventAccumulator (keeping every event:
size_guidance 0). With --check EXPECTED.json (what test_tensorboard_writer.cpp's case
[.tensorboard_export] wrote: {"scalars": {tag: [[step, value]]}, "texts": {tag: [[step, text]]}})
it verifies instead, failing on any difference:
  - every record's CRCs (the tensorboard reader itself skips a bad record silently),
  - every record parses as tensorflow.Event and serializes back to the same bytes (our hand
    encoding is what protobuf writes), the first one being file_version "brain.Event:2",
  - the scalars equal the expected ones exactly at float32 (NaN as NaN), with no tag more or
    less, and the texts through the text plugin.

With --against-metrics METRICS.jsonl (vescale-train's JSONL of the same run) it checks that every
scalar of every step is in the event files under the trainer's tag, at float32, and that the
samples (train.sample_every) are there as text.

usage: read_tensorboard.py DIR  |  --check EXPECTED.json DIR  |  --against-metrics M.jsonl DIR
"""
import argparse
import glob
import json
import math
import os
import struct
import sys

from tensorboard.backend.event_processing import event_accumulator
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub import errors, pywrap_tensorflow


def load(log_dir):
    acc = event_accumulator.EventAccumulator(
        log_dir, size_guidance={event_accumulator.SCALARS: 0, event_accumulator.TENSORS: 0})
    acc.Reload()
    return acc


def scalars(acc):
    return {tag: [[e.step, e.value] for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def texts(acc):
    try:
        tags = acc.PluginTagToContent("text")
    except KeyError:  # no text at all
        return {}
    return {tag: [[e.step, e.tensor_proto.string_val[0].decode("utf-8")] for e in acc.Tensors(tag)]
            for tag in tags}


def raw_records(path):
    """Every record of one event file; raises DataLossError on a bad CRC or a torn record."""
    reader = pywrap_tensorflow.PyRecordReader_New(path)
    out = []
    while True:
        try:
            reader.GetNext()
        except errors.OutOfRangeError:
            return out
        except errors.DataLossError as e:
            sys.exit(f"record {len(out)}: {e.message}")
        out.append(reader.record())


def as_float32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def same(got, want):
    if math.isnan(want):
        return math.isnan(got)
    return got == as_float32(want) and math.copysign(1, got) == math.copysign(1, want)


def check(expected_path, log_dir):
    with open(expected_path, encoding="utf-8") as f:
        expected = json.load(f)
    failures = []
    files = sorted(glob.glob(os.path.join(log_dir, "events.out.tfevents.*")))
    if len(files) != 1:
        sys.exit(f"{log_dir}: expected one event file, found {len(files)}: {files}")
    records = raw_records(files[0])
    for i, raw in enumerate(records):
        event = event_pb2.Event.FromString(raw)
        if event.SerializeToString() != raw:
            failures.append(f"record {i}: protobuf serializes it differently: {event}")
        if i == 0 and event.file_version != "brain.Event:2":
            failures.append(f"record 0: file_version {event.file_version!r}, not 'brain.Event:2'")
    n_values = sum(len(v) for v in expected["scalars"].values()) + sum(
        len(v) for v in expected["texts"].values())
    if len(records) != 1 + n_values:
        failures.append(f"{len(records)} records, expected 1 + {n_values}")

    acc = load(log_dir)
    got = scalars(acc)
    if sorted(got) != sorted(expected["scalars"]):
        failures.append(f"scalar tags {sorted(got)}, expected {sorted(expected['scalars'])}")
    for tag, points in expected["scalars"].items():
        have = got.get(tag, [])
        if [s for s, _ in have] != [s for s, _ in points]:
            failures.append(f"{tag}: steps {[s for s, _ in have]}, expected {[s for s, _ in points]}")
            continue
        for (step, value), (_, want) in zip(have, points):
            if not same(value, want):
                failures.append(f"{tag} step {step}: {value!r}, expected {want!r} as float32 "
                                f"({as_float32(want)!r})")
    got_texts = texts(acc)
    if got_texts != expected["texts"]:
        failures.append(f"texts {got_texts}, expected {expected['texts']}")
    if failures:
        sys.exit("tensorboard reader disagrees with the C++ writer:\n  " + "\n  ".join(failures))
    print(f"read_tensorboard: {sum(len(p) for p in got.values())} scalars of {len(got)} tags "
          f"and {len(got_texts)} text tag(s) read back exactly from {files[0]}")


# The trainer's tags for the metrics JSONL's keys.
TRAINER_TAGS = {"loss": "train/loss", "lr": "train/lr", "grad_norm": "train/grad_norm",
                "param_norm": "train/param_norm",
                "step_ms": "perf/step_ms", "tokens_per_s": "perf/tokens_per_s", "mfu": "perf/mfu",
                "memory_gb": "perf/memory_gb", "val_loss": "val/loss"}


def against_metrics(metrics_path, log_dir, sample_steps):
    """Every scalar of every step of vescale-train's metrics JSONL is in the event files at
    float32, with nothing extra, and a sample text at each of sample_steps."""
    lines = [json.loads(line) for line in open(metrics_path, encoding="utf-8") if line.strip()]
    rows = [r for r in lines if "loss" in r]
    want = {}
    for r in rows:
        for key, tag in TRAINER_TAGS.items():
            if key in r:
                want.setdefault(tag, []).append([r["step"], r[key]])
        if "experts" in r:  # mixture of experts: per layer and the worst
            for layer, e in r["experts"].items():
                want.setdefault(f"moe/imbalance/{layer}", []).append([r["step"], e["imbalance"]])
            want.setdefault("moe/imbalance_max", []).append([r["step"], r["expert_imbalance_max"]])
    for t in (r for r in lines if "timeline" in r):  # the timeline window's summary line
        step, summary = t["step"], t["timeline"]
        for rank in summary["ranks"]:
            for k in ("step_ms", "compute_share", "overlapped_share", "exposed_share"):
                want.setdefault(f"timeline/rank{rank['rank']}/{k}", []).append([step, rank[k]])
        want.setdefault("timeline/straggler_rank", []).append([step, summary["straggler"]["rank"]])
        want.setdefault("timeline/compute_gap_ms_per_step", []).append(
            [step, summary["straggler"]["compute_gap_ms_per_step"]])
    acc = load(log_dir)
    got = scalars(acc)
    failures = []
    if sorted(got) != sorted(want):
        failures.append(f"tags {sorted(got)}, the JSONL gives {sorted(want)}")
    for tag, points in want.items():
        have = got.get(tag, [])
        if [s for s, _ in have] != [s for s, _ in points]:
            failures.append(f"{tag}: steps {[s for s, _ in have]}, JSONL {[s for s, _ in points]}")
            continue
        for (step, value), (_, w) in zip(have, points):
            if not same(value, w):
                failures.append(f"{tag} step {step}: {value!r}, JSONL {w!r}")
    samples = texts(acc).get("sample", [])
    if [s for s, _ in samples] != sample_steps or not all(t for _, t in samples):
        failures.append(f"samples at steps {[s for s, _ in samples]}, expected {sample_steps}")
    if failures:
        sys.exit("event files disagree with the metrics JSONL:\n  " + "\n  ".join(failures))
    n = sum(len(p) for p in want.values())
    print(f"read_tensorboard: {n} scalars over {len(rows)} steps ({', '.join(sorted(want))}) and "
          f"{len(samples)} samples equal the metrics JSONL")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log_dir")
    ap.add_argument("--check", metavar="EXPECTED_JSON")
    ap.add_argument("--against-metrics", metavar="METRICS_JSONL")
    ap.add_argument("--sample-steps", default="", help="with --against-metrics: 3,6")
    args = ap.parse_args()
    if not os.path.isdir(args.log_dir):
        sys.exit(f"{args.log_dir}: not a folder (run the [.tensorboard_export] case first)")
    if args.check:
        check(args.check, args.log_dir)
    elif args.against_metrics:
        steps = [int(x) for x in args.sample_steps.split(",") if x]
        against_metrics(args.against_metrics, args.log_dir, steps)
    else:
        print(json.dumps(scalars(load(args.log_dir))))


if __name__ == "__main__":
    main()
