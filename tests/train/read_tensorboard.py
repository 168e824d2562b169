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

usage: read_tensorboard.py DIR     |     read_tensorboard.py --check EXPECTED.json DIR
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
    return {tag: [[e.step, e.tensor_proto.string_val[0].decode("utf-8")] for e in acc.Tensors(tag)]
            for tag in acc.PluginTagToContent("text")}


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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log_dir")
    ap.add_argument("--check", metavar="EXPECTED_JSON")
    args = ap.parse_args()
    if not os.path.isdir(args.log_dir):
        sys.exit(f"{args.log_dir}: not a folder (run the [.tensorboard_export] case first)")
    if args.check:
        check(args.check, args.log_dir)
    else:
        print(json.dumps(scalars(load(args.log_dir))))


if __name__ == "__main__":
    main()
