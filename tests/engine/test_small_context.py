"""A context smaller than specchat's batch: llama.cpp pads its size (96 → 256) and caps its batch at the size asked
for (96), so a decode sized by the padded context or by the batch specchat asked for (512) fails llama.cpp's assert
and takes the whole process down. Run in a child process, where that abort is a failure and not the suite's end."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent("""
    import sys
    from pathlib import Path
    import llama_cpp as lc
    from specchat.engine.draft_length.costs import measure_depth_slope
    from specchat.engine.llama import Context, Model

    model = Model(Path(sys.argv[1]))
    ctx = Context(model, n_ctx=96, threads=1)
    print("batch", ctx.n_batch, lc.llama_n_batch(ctx.ptr))
    ctx.decode([model.bos] * 150)  # longer than the batch, within the padded context: decoded in chunks
    print("cached", len(ctx.cached))
    ctx.truncate(0)
    print("slope", measure_depth_slope(ctx, model.bos))
""")


def test_a_context_smaller_than_the_batch_decodes_and_times_its_slope_in_chunks_it_can_take(target_path: Path):
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(target_path)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    ours, llamas = lines["batch"].split()
    assert ours == llamas  # specchat's batch is the one llama.cpp took, not the one it asked for
    assert lines["cached"] == "150"
    assert float(lines["slope"]) >= 0
