"""``msopgen``: custom Ascend C operator projects (CANN's msopgen, plus build/install steps).

    msopgen gen -i add_custom.json -c ai_core-Ascend910B1 -out ./AddCustom [-op AddCustom]
    msopgen build ./AddCustom                      # what the project's build.sh runs
    msopgen install ./AddCustom/build_out [--install-path DIR]   # default ~/.cache/pycann/opp
    source DIR/vendors/customize/bin/set_env.bash  # ASCEND_CUSTOM_OPP_PATH for atc / acl / InferSession
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from pycann.ascendc.opdev.project import ProjectError, build, gen, install
from pycann.ascendc.opdev.vendor import VendorError

DEFAULT_INSTALL = Path.home() / ".cache" / "pycann" / "opp"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="msopgen", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gen", help="scaffold a project from a prototype JSON")
    g.add_argument("-i", "--input", required=True, type=Path)
    g.add_argument("-c", "--compute_unit", required=True, help="ai_core-<soc_version>")
    g.add_argument("-out", "--output", required=True, type=Path)
    g.add_argument("-op", "--op", default=None)
    g.add_argument("-lan", "--language", default="py", help="py (pycann's Ascend C kit)")
    g.add_argument("-m", "--mode", default="0", help="0: new project, 1: add ops (same here)")
    b = sub.add_parser("build", help="check a project and lay out build_out/vendors/<vendor>")
    b.add_argument("project", type=Path)
    i = sub.add_parser("install", help="install build_out into <install-path>/vendors")
    i.add_argument("build_out", type=Path)
    i.add_argument("--install-path", type=Path, default=DEFAULT_INSTALL)
    args = ap.parse_args(argv)
    try:
        if args.cmd == "gen":
            for p in gen(args.input, args.compute_unit, args.output, args.op):
                print(f"msopgen: wrote {p}")
        elif args.cmd == "build":
            v = build(args.project)
            print(f"msopgen: built vendor package {v}")
        else:
            for v in install(args.build_out, args.install_path):
                print(f"msopgen: installed {v}\n  source {v / 'bin' / 'set_env.bash'}")
    except (ProjectError, VendorError, ValueError) as e:
        print(f"msopgen: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
