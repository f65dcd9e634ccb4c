"""``--fusion_switch_file`` reader (CANN's format, ATC's ``--fusion_switch_file`` option).

Two forms: lines ``PassName:off`` (``#`` comments allowed), or JSON
``{"Switch": {"GraphFusion": {"ALL": "off" | "PassName": "off"}, "UBFusion": {...}}}``.
Returns the pass names switched off. ``ALL`` expands to every *fusion* pass, as in CANN,
where it covers the graph/UB fusion rules (ConvBatchNormFusionPass and ConvScaleBiasFold
included): constant folding, dead-code elimination and kernel and layout selection stay on
(name them to turn them off). A pass named ``on`` stays on even under ``ALL`` off, so
"everything off but these" reads as in CANN.
"""

from __future__ import annotations

import json

from pycann.errors import OptionError


def _all_passes() -> list[str]:
    from pycann.ge.compile.pipelines import COMPILE_PIPELINE, REQUIRED_PASSES

    return sorted({n for n, _ in COMPILE_PIPELINE} - REQUIRED_PASSES)


# Switchable, but not fusions: ``ALL`` leaves them on.
NOT_FUSIONS = {"ConstantFolding", "DeadCodeElimination", "KernelSelection", "LayoutSelection"}


def _fusion_passes() -> list[str]:
    return [n for n in _all_passes() if n not in NOT_FUSIONS]


def unknown_passes(names: list[str]) -> list[str]:
    """Names that are no switchable pycann pass: a typo, or a CANN pass pycann does not have.
    atc warns about them (a CANN switch file naming NPU-only passes must still be accepted)."""
    known = set(_all_passes())
    return [n for n in names if n not in known]


def switchable_passes() -> list[str]:
    return _all_passes()


def read_fusion_switch_file(path: str) -> list[str]:
    try:
        text = open(path, encoding="utf-8").read()
    except OSError as e:
        raise OptionError(f"E10001: cannot read --fusion_switch_file [{path}]: {e.strerror}") from None
    off: list[str] = []
    if text.lstrip().startswith("{"):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise OptionError(f"E10001: --fusion_switch_file [{path}] is not valid JSON: {e}") from None
        except RecursionError:  # json's decoder recurses per nesting level
            raise OptionError(f"E10001: --fusion_switch_file [{path}]: its JSON nests deeper than Python's "
                              "recursion limit (the file nests 3 levels)") from None
        on: set[str] = set()
        groups = doc.get("Switch") if isinstance(doc, dict) else None
        if not isinstance(groups, dict) or not all(isinstance(g, dict) for g in groups.values()):
            raise OptionError(f"E10001: --fusion_switch_file [{path}]: expected "
                              '{"Switch": {"GraphFusion": {"PassName": "off"}, "UBFusion": {...}}}')
        for gname, group in groups.items():
            for name, state in group.items():
                value = str(state).lower() if isinstance(state, str) else None
                if value not in ("on", "off"):
                    raise OptionError(f"E10001: --fusion_switch_file [{path}]: value {json.dumps(state)} of "
                                      f'"{gname}"."{name}" is invalid: use "on" or "off"')
                names = _fusion_passes() if name == "ALL" else [name]
                if value == "off":
                    off.extend(names)
                elif name != "ALL":
                    on.add(name)  # "ALL": "off" with some "on": only those stay (CANN's use)
        return [n for n in off if n not in on]
    on_txt: set[str] = set()
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, state = line.partition(":")
        if not sep or state.strip().lower() not in ("on", "off"):
            raise OptionError(f"E10001: --fusion_switch_file line {lineno} '{raw}': expected 'PassName:off'")
        if state.strip().lower() == "off":
            off.extend(_fusion_passes() if name.strip() == "ALL" else [name.strip()])
        elif name.strip() != "ALL":
            on_txt.add(name.strip())
    return [n for n in off if n not in on_txt]
