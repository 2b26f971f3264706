"""Re-freeze the golden per-request tables: ``python -m tests.golden.freeze [CASE ...]``.

Run only after explaining, in the commit message, why the outputs moved."""
from __future__ import annotations

import sys

from .cases import DATA, case_names, golden_path, request_table


def main(names: list[str]) -> None:
    DATA.mkdir(parents=True, exist_ok=True)
    for name in names or case_names():
        df = request_table(name)
        df.to_csv(golden_path(name), index=False, float_format=None, compression={"method": "gzip", "mtime": 0})
        print(f"froze {name}: {len(df)} requests")


if __name__ == "__main__":
    main(sys.argv[1:])
