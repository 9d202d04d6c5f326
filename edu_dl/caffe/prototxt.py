"""Read Caffe's .prototxt files with protobuf's own text-format parser, never a hand-written one.

The schema is ``caffe_subset.proto``: BVLC Caffe's field names and numbers for the messages
edu_dl supports. Its Python module ``caffe_subset_pb2`` was generated once by ``protoc`` (from the
``grpcio-tools`` wheel) and is committed next to it; a test regenerates it and compares the
descriptors. Generating ahead of time, not at import, keeps ``protoc`` a developer tool rather
than a run-time dependency, exactly as Caffe ships its generated ``caffe_pb2``. (The messages
live in protobuf package ``caffe``, so this module and pycaffe's ``caffe_pb2`` cannot both be
imported into one process.)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from google.protobuf import text_format
from google.protobuf.message import Message

from edu_dl.caffe import caffe_subset_pb2 as pb

M = TypeVar("M", bound=Message)


class CaffeFormatError(ValueError):
    """A .prototxt file that edu_dl cannot use; the message names the file and the line."""


@dataclass(frozen=True)
class LayerSource:
    """Where a layer was written: its file and the 1-based lines of ``layer {`` and ``type:``."""

    path: str
    line: int
    type_line: int


def read_text(path: str | Path, message: M) -> M:
    """Parse the text-format file ``path`` into ``message``; errors carry file:line:column."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise CaffeFormatError(f"{path}: cannot read the file ({exc.strerror or exc})") from None
    try:
        return text_format.Parse(text, message)
    except text_format.ParseError as exc:
        # ParseError's text is "line:column : message"; the file name completes the location.
        where = f"{exc.GetLine()}:{exc.GetColumn()}" if exc.GetLine() is not None else ""
        detail = str(exc).split(" : ", 1)[-1]
        kind = type(message).__name__
        raise CaffeFormatError(f"{path}:{where}: not a valid Caffe {kind}: {detail}") from None


def layer_sources(path: str | Path) -> list[LayerSource]:
    """The line of every top-level ``layer`` block, in file order, via protobuf's tokenizer."""
    lines = Path(path).read_text(encoding="utf-8").splitlines(keepends=True)
    tokens = text_format.Tokenizer(lines)
    found: list[LayerSource] = []
    depth, type_next = 0, False
    while not tokens.AtEnd():
        token, line = tokens.token, tokens._line + 1  # the tokenizer counts lines from 0
        if token in ("{", "<"):
            depth += 1
        elif token in ("}", ">"):
            depth -= 1
        elif depth == 0 and token == "layer":
            found.append(LayerSource(str(path), line, line))
        elif depth == 1 and token == "type" and found:
            type_next = True
        elif type_next and token != ":":
            found[-1] = LayerSource(str(path), found[-1].line, line)
            type_next = False
        tokens.NextToken()
    return found


def read_net(path: str | Path) -> tuple[pb.NetParameter, list[LayerSource]]:
    """A NetParameter from ``path`` and where each of its layers was written."""
    net = read_text(path, pb.NetParameter())
    return net, layer_sources(path)


def read_solver(path: str | Path) -> pb.SolverParameter:
    """A SolverParameter from ``path``; CaffeFormatError (file:line:column) if it does not parse."""
    return read_text(path, pb.SolverParameter())


def state_meets_rule(state: pb.NetState, rule: pb.NetStateRule) -> bool:
    """Caffe's Net::StateMeetsRule: phase, level range and stages must all match."""
    if rule.HasField("phase") and rule.phase != state.phase:
        return False
    if rule.HasField("min_level") and state.level < rule.min_level:
        return False
    if rule.HasField("max_level") and state.level > rule.max_level:
        return False
    stages = set(state.stage)
    return set(rule.stage) <= stages and not set(rule.not_stage) & stages


def filter_net(
    net: pb.NetParameter, sources: list[LayerSource], phase: pb.Phase = pb.TRAIN
) -> tuple[pb.NetParameter, list[LayerSource]]:
    """Caffe's Net::FilterNet: keep the layers whose include/exclude rules admit ``phase``."""
    state = pb.NetState()
    state.CopyFrom(net.state)
    state.phase = phase
    kept = pb.NetParameter()
    kept.CopyFrom(net)
    del kept.layer[:]
    kept_sources = []
    for layer, source in zip(net.layer, sources):
        if layer.include and layer.exclude:
            raise CaffeFormatError(f"{source.path}:{source.line}: layer '{layer.name}' has both "
                                   f"include and exclude rules; Caffe allows one kind only")
        if layer.include:
            keep = any(state_meets_rule(state, rule) for rule in layer.include)
        else:
            keep = not any(state_meets_rule(state, rule) for rule in layer.exclude)
        if keep:
            kept.layer.add().CopyFrom(layer)
            kept_sources.append(source)
    return kept, kept_sources
