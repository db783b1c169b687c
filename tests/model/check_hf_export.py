#!/usr/bin/env python3
"""Checks gradbox's Hugging Face folders against the real `transformers` library, both ways.

1. `hf_interop_tool export DIR` writes tiny GPT-2 and LLaMA models (tied, untied, GQA/MQA with
   biases) plus reference logits; each folder must load with
   AutoModelForCausalLM.from_pretrained with no missing or unexpected weights, and give the
   same logits.
2. transformers builds tiny GPT-2 and LLaMA models from configs (random weights, nothing
   downloaded), saves them with save_pretrained and writes reference logits;
   `hf_interop_tool check-import DIR` must reproduce them.

Prints the max abs diff per model; exits 1 over the tolerance, 77 (skip) when transformers or
safetensors cannot be imported.
"""
import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

TOLERANCE = 1e-4
SKIP = 77


def check_export(tool, root):
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    subprocess.run([tool, "export", str(root)], check=True)
    worst = 0.0
    cases = sorted(p for p in root.iterdir() if (p / "reference.safetensors").exists())
    assert cases, f"{root}: the tool exported nothing"
    for case in cases:
        model, info = AutoModelForCausalLM.from_pretrained(str(case), output_loading_info=True)
        problems = {k: v for k, v in info.items() if v}  # missing/unexpected/mismatched keys
        if problems:
            print(f"FAIL export {case.name}: loading info {problems}")
            return False
        model.eval()
        ref = load_file(str(case / "reference.safetensors"))
        with torch.no_grad():
            logits = model(ref["input_ids"]).logits
        diff = (logits - ref["logits"]).abs().max().item()
        print(f"export {case.name}: {type(model).__name__}, max abs diff {diff:.3g}")
        worst = max(worst, diff)
    return worst <= TOLERANCE


def hf_models():
    from transformers import GPT2Config, LlamaConfig

    yield "gpt2", GPT2Config(vocab_size=300, n_positions=64, n_embd=48, n_layer=2, n_head=3,
                             resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    yield "llama", LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=176,
                               num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2,
                               max_position_embeddings=64, rms_norm_eps=1e-6,
                               tie_word_embeddings=False)


def check_import(tool, root):
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    ok = True
    for name, config in hf_models():
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config).eval()
        with torch.no_grad():
            for p in model.parameters():  # off the init values (unit norms, zero biases)
                p.add_(torch.randn_like(p) * 0.05)
        case = root / f"hf_{name}"
        model.save_pretrained(str(case))
        ids = torch.randint(config.vocab_size, (2, 40))
        with torch.no_grad():
            logits = model(ids).logits.contiguous()
        save_file({"input_ids": ids, "logits": logits}, str(case / "reference.safetensors"))
        result = subprocess.run([tool, "check-import", str(case)])
        ok = ok and result.returncode == 0
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tool", required=True, help="path of the hf_interop_tool executable")
    parser.add_argument("--dir", required=True, help="scratch folder (emptied first)")
    args = parser.parse_args()
    # Everything is built from configs: never reach for the hub; keep the output to the numbers.
    os.environ.update(HF_HUB_OFFLINE="1", HF_HUB_DISABLE_PROGRESS_BARS="1",
                      TRANSFORMERS_VERBOSITY="error")
    try:
        import safetensors  # noqa: F401
        import torch  # noqa: F401
        import transformers
    except ImportError as e:
        print(f"SKIP: {e} (pip install transformers safetensors)")
        return SKIP
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    tool = str(Path(args.tool).resolve())
    root = Path(args.dir)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    exported = check_export(tool, root / "export")
    imported = check_import(tool, root / "import")
    print("OK" if exported and imported else f"FAIL (tolerance {TOLERANCE})")
    return 0 if exported and imported else 1


if __name__ == "__main__":
    sys.exit(main())
