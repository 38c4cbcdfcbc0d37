#!/usr/bin/env python3
"""The PyTorch peer of bench_train: the same training case timed the same way, in eager mode.

A case is a model, batch, device and precision. Models are built to match mintrain's layer for
layer (the parameter counts are printed so bench_train.sh can compare them):
  lenet5, mlp            as layers/models/lenet5.cpp and layers/models/mlp.cpp (1x28x28 inputs)
  resnet20/32/56         CIFAR ResNets with 1x1-conv + BN projection shortcuts (3x32x32 inputs)
  resnet18/50            torchvision's models, whose names and layout ours follow (3x224x224)
  bert_tiny ... bert_base  a post-LN BERT encoder as layers/models/bert.h (fused qkv, exact GELU,
                         tied decoder, vocabulary projection of the masked positions only)
Inputs are synthetic and made once on the device: images and labels, or token ids with BERT's
masking (15% of positions predicted; of those 80% [MASK], 10% random, 10% kept). The optimizer
is the one bench_train uses: SGD (lr 0.01, momentum 0.9, weight decay 1e-4) for the CNNs, AdamW
(lr 1e-4, eps 1e-6, weight decay 0.01) for BERT, with PyTorch's default implementation.

Precision: fp32 (TF32 off for matmul and cuDNN), tf32 (both on), bf16 and fp16 through
torch.autocast (fp16 with GradScaler). On a GPU cudnn.benchmark is on. Attention: PyTorch's
fused scaled_dot_product_attention where the version has it (2.0+), else matmul + softmax
(--attention picks).

Timing: --warmup steps, then --repeats spans of --iters steps, each ended by a device
synchronize; the median span's images/s (sequences/s for BERT) is the figure. Prints one line,
"pytorch_train framework=pytorch model=... throughput=... params=...", or the same line ending in
"error=<why>" (exit status 1). Runs on Debian's python3-torch 1.13 (CPU) and PyTorch 2.x (CUDA):
  /usr/bin/python3 apps/bench/pytorch_train.py --model resnet20 --batch 32 --threads 2
"""
import argparse
import math
import statistics
import sys
import time

MODELS = ["mlp", "lenet5", "resnet20", "resnet32", "resnet56", "resnet18", "resnet50",
          "bert_tiny", "bert_mini", "bert_small", "bert_base"]
PRECISIONS = ["fp32", "tf32", "bf16", "fp16"]
# (layers, hidden, heads) of the BERT presets (layers/models/bert.cpp).
BERT_SIZES = {"bert_tiny": (2, 128, 2), "bert_mini": (4, 256, 4), "bert_small": (4, 512, 8),
              "bert_base": (12, 768, 12)}
IGNORE = -100
SPECIAL_IDS = 5  # ids 0-4 are [PAD] [UNK] [CLS] [SEP] [MASK], as in mintrain's synthetic tokens
MASK_ID = 4


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True,
                    help="one of " + ", ".join(MODELS) + " (a comma-separated list with --params-only)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--precision", default="fp32", choices=PRECISIONS)
    ap.add_argument("--image-size", type=int, default=0, help="0 = the model's usual size")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=30522)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="0 = PyTorch's default")
    ap.add_argument("--cudnn-benchmark", type=int, default=1)
    ap.add_argument("--attention", default="auto", choices=["auto", "sdpa", "matmul"])
    ap.add_argument("--profile", type=int, default=0,
                    help="then this many steps under torch.profiler: one pytorch_train_op line per op "
                         "(self CPU time per step), as bench_train --profile")
    ap.add_argument("--params-only", action="store_true",
                    help="print each model's parameter count and exit (no timing)")
    args = ap.parse_args(argv)
    models = args.model.split(",") if args.params_only else [args.model]
    for m in models:
        if m not in MODELS:
            ap.error(f"--model: unknown model {m!r}; give one of {', '.join(MODELS)}")
    for flag, value, low in (("--batch", args.batch, 1), ("--iters", args.iters, 1),
                             ("--repeats", args.repeats, 1), ("--warmup", args.warmup, 0),
                             ("--seq-len", args.seq_len, 8), ("--threads", args.threads, 0)):
        if value < low:
            ap.error(f"{flag} must be >= {low}, got {value}")
    return args, models


# ---------------------------------------------------------------------------- models

def lenet5(torch, nn, F):
    """layers/models/lenet5.cpp: two 5x5 convolutions with max pooling, three linear layers."""
    class LeNet5(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
            self.conv2 = nn.Conv2d(6, 16, 5)
            self.fc1 = nn.Linear(16 * 5 * 5, 120)
            self.fc2 = nn.Linear(120, 84)
            self.fc3 = nn.Linear(84, 10)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.conv1(x)), 2)
            x = F.max_pool2d(F.relu(self.conv2(x)), 2)
            x = torch.flatten(x, 1)
            return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))

    return LeNet5()


def build_model(name, args, torch, nn, F):
    """The model, its input shape ([C, H, W] for images, None for BERT) and its classes."""
    if name == "lenet5":
        if args.image_size not in (0, 28):
            raise ValueError("the peer's LeNet-5 takes 28x28 inputs only; drop --image-size")
        return lenet5(torch, nn, F), [1, 28, 28], 10
    if name == "mlp":
        side = args.image_size or 28
        layers, width = [nn.Flatten()], side * side
        for hidden in (256, 128):
            layers += [nn.Linear(width, hidden), nn.ReLU()]
            width = hidden
        return nn.Sequential(*layers, nn.Linear(width, 10)), [1, side, side], 10
    if name in ("resnet20", "resnet32", "resnet56"):
        return cifar_resnet(int(name[6:]), nn, F), [3, args.image_size or 32, args.image_size or 32], 10
    if name in ("resnet18", "resnet50"):
        import torchvision
        side = args.image_size or 224
        return getattr(torchvision.models, name)(num_classes=1000), [3, side, side], 1000
    layers, hidden, heads = BERT_SIZES[name]
    return bert_mlm(torch, nn, F, args, layers, hidden, heads), None, args.vocab


def cifar_resnet(depth, nn, F):
    """ResNet-20/32/56 for 32x32 images as layers/models/resnet.cpp builds it."""

    def conv_bn(cin, cout, k, stride):
        return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, bias=False), nn.BatchNorm2d(cout))

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            # The projection shortcut (1x1 conv + BN) wherever the shape changes.
            self.downsample = conv_bn(cin, cout, 1, stride) if stride != 1 or cin != cout else None

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return F.relu(out + (self.downsample(x) if self.downsample is not None else x))

    class ResNetCifar(nn.Module):
        def __init__(self):
            super().__init__()
            n = (depth - 2) // 6
            self.conv1 = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(16)
            stages, cin = [], 16
            for cout, stride in ((16, 1), (32, 2), (64, 2)):
                blocks = []
                for b in range(n):
                    blocks.append(BasicBlock(cin, cout, stride if b == 0 else 1))
                    cin = cout
                stages.append(nn.Sequential(*blocks))
            self.layer1, self.layer2, self.layer3 = stages
            self.fc = nn.Linear(64, 10)

        def forward(self, x):
            h = F.relu(self.bn1(self.conv1(x)))
            h = self.layer3(self.layer2(self.layer1(h)))
            return self.fc(h.mean(dim=(2, 3)))

    return ResNetCifar()


def bert_mlm(torch, nn, F, args, num_layers, hidden, heads):
    """BertForMaskedLM as layers/models/bert.h: post-LN layers, masked rows only in the head."""
    p, eps, max_position = 0.1, 1e-12, max(512, args.seq_len)
    use_sdpa = args.attention == "sdpa" or (
        args.attention == "auto" and hasattr(F, "scaled_dot_product_attention"))
    if use_sdpa and not hasattr(F, "scaled_dot_product_attention"):
        raise ValueError(f"--attention sdpa needs PyTorch 2.0 or later (this is {torch.__version__})")
    head_dim = hidden // heads

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(hidden, 3 * hidden)  # rows: query, key, value; head-major
            self.dense = nn.Linear(hidden, hidden)
            self.attention_norm = nn.LayerNorm(hidden, eps=eps)
            self.intermediate = nn.Linear(hidden, 4 * hidden)
            self.output = nn.Linear(4 * hidden, hidden)
            self.output_norm = nn.LayerNorm(hidden, eps=eps)
            self.dropout = nn.Dropout(p)

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = self.qkv(x).view(b, s, 3, heads, head_dim).permute(2, 0, 3, 1, 4)
            if use_sdpa:
                ctx = F.scaled_dot_product_attention(q, k, v, dropout_p=p if self.training else 0.0)
            else:
                probs = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(head_dim), dim=-1)
                ctx = F.dropout(probs, p, self.training) @ v
            attended = self.dense(ctx.transpose(1, 2).reshape(b, s, hidden))
            h = self.attention_norm(x + self.dropout(attended))
            return self.output_norm(h + self.dropout(self.output(F.gelu(self.intermediate(h)))))

    class BertForMaskedLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.word = nn.Embedding(args.vocab, hidden)
            self.position = nn.Embedding(max_position, hidden)
            self.token_type = nn.Embedding(2, hidden)
            self.embedding_norm = nn.LayerNorm(hidden, eps=eps)
            self.dropout = nn.Dropout(p)
            self.layers = nn.ModuleList(Layer() for _ in range(num_layers))
            self.head_dense = nn.Linear(hidden, hidden)
            self.head_norm = nn.LayerNorm(hidden, eps=eps)
            self.decoder_bias = nn.Parameter(torch.zeros(args.vocab))  # decoder weight: self.word's
            self.attention = "sdpa" if use_sdpa else "matmul"

        def forward(self, ids, labels):
            s = ids.shape[1]
            h = self.word(ids) + self.position.weight[:s] + self.token_type.weight[0]
            h = self.dropout(self.embedding_norm(h))
            for layer in self.layers:
                h = layer(h)
            flat = labels.reshape(-1)
            rows = (flat != IGNORE).nonzero().squeeze(1)  # the predicted positions
            picked = h.reshape(-1, hidden).index_select(0, rows)
            t = self.head_norm(F.gelu(self.head_dense(picked)))
            logits = F.linear(t, self.word.weight, self.decoder_bias)
            return F.cross_entropy(logits, flat.index_select(0, rows))

    model = BertForMaskedLM()
    # BERT's init, as ours: truncated normal (2 std) matrices and tables, zero biases. PyTorch's
    # defaults (N(0, 1) embeddings) would start from huge logits, and fp16 runs from overflows.
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.trunc_normal_(m.weight, std=0.02, a=-0.04, b=0.04)
        if isinstance(m, nn.Linear):
            nn.init.zeros_(m.bias)
    return model


def synthetic_batch(torch, args, shape, classes, device):
    g = torch.Generator().manual_seed(1)
    if shape is not None:
        images = torch.rand([args.batch] + shape, generator=g)
        labels = torch.randint(0, min(classes, 10), (args.batch,), generator=g)
        return images.to(device), labels.to(device)
    tokens = torch.randint(SPECIAL_IDS, args.vocab, (args.batch, args.seq_len), generator=g)
    chosen = torch.rand(tokens.shape, generator=g) < 0.15
    kind = torch.rand(tokens.shape, generator=g)
    random_ids = torch.randint(SPECIAL_IDS, args.vocab, tokens.shape, generator=g)
    inputs = torch.where(chosen & (kind < 0.8), torch.full_like(tokens, MASK_ID), tokens)
    inputs = torch.where(chosen & (kind >= 0.8) & (kind < 0.9), random_ids, inputs)
    labels = torch.where(chosen, tokens, torch.full_like(tokens, IGNORE))
    return inputs.to(device), labels.to(device)


# ---------------------------------------------------------------------------- timing

def line(args, **fields):
    head = (f"pytorch_train framework=pytorch model={args.model} device={args.device} "
            f"precision={args.precision} batch={args.batch}")
    return " ".join([head] + [f"{k}={v}" for k, v in fields.items()])


def set_tf32(torch, on):
    """TF32 for float32 matmul and convolutions, through the API this PyTorch has: 2.9 brought
    fp32_precision ("tf32" / "ieee") and deprecated allow_tf32; the two must not be mixed."""
    major, minor = (int(part) for part in torch.__version__.split(".")[:2])
    if (major, minor) >= (2, 9):
        mode = "tf32" if on else "ieee"
        torch.backends.cuda.matmul.fp32_precision = mode
        torch.backends.cudnn.conv.fp32_precision = mode
    else:
        torch.backends.cuda.matmul.allow_tf32 = on
        torch.backends.cudnn.allow_tf32 = on


def profile_ops(args, torch, step, sync):
    """Self time per op (aten:: ops and the autograd nodes' own time), per step, largest first,
    then the time outside every op: the counterpart of bench_train --profile's lines. On the CPU
    it is the op's self CPU time; on a GPU, the self device time of the kernels it launched (the
    CUDA activity), as bench_train's GPU profile times kernels, not launches."""
    from torch.profiler import profile, ProfilerActivity
    on_gpu = args.device.startswith("cuda")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        for _ in range(args.profile):
            step()
        sync()
        step_s = (time.perf_counter() - start) / args.profile

    def self_us(e):
        if not on_gpu:
            return e.self_cpu_time_total
        # PyTorch 2.4 renamed self_cuda_time_total to self_device_time_total.
        return getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)

    # On a GPU the kernels are rows of their own as well: only the ops' rows, so nothing counts twice.
    ops = [e for e in prof.key_averages() if not on_gpu or str(getattr(e, "device_type", "CPU")).endswith("CPU")]
    events = sorted(ops, key=self_us, reverse=True)
    inside = 0.0
    for e in events:
        s = self_us(e) / 1e6 / args.profile
        if s <= 0:
            continue
        inside += s
        print(f"pytorch_train_op name={e.key.replace(' ', '_')} ms_per_step={s * 1e3:.3f} share={s / step_s:.3f}")
    print(f"pytorch_train_op name=(outside_ops) ms_per_step={max(0.0, step_s - inside) * 1e3:.3f} "
          f"share={max(0.0, step_s - inside) / step_s:.3f}", flush=True)


def run(args, torch, nn, F):
    device = torch.device(args.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("this PyTorch sees no CUDA device; give --device cpu")
        torch.backends.cudnn.benchmark = bool(args.cudnn_benchmark)
        set_tf32(torch, args.precision == "tf32")
    elif args.precision == "tf32":
        raise ValueError("tf32 is a GPU setting; on the CPU use fp32")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    model, shape, classes = build_model(args.model, args, torch, nn, F)
    model.to(device).train()
    x, y = synthetic_batch(torch, args, shape, classes, device)
    if shape is not None:
        loss_fn = lambda: F.cross_entropy(model(x), y)  # noqa: E731
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    else:
        loss_fn = lambda: model(x, y)  # noqa: E731
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, eps=1e-6, weight_decay=0.01)

    low = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.precision)
    autocast = lambda: torch.autocast(device.type, dtype=low, enabled=low is not None)  # noqa: E731
    if low is not None:
        with autocast():  # an older PyTorch may quietly run float32 instead: refuse that
            probe = torch.ones(8, 8, device=device) @ torch.ones(8, 8, device=device)
        if probe.dtype != low:
            raise RuntimeError(f"torch.autocast to {args.precision} on {device.type} is not supported "
                               f"by PyTorch {torch.__version__}")
    scaler = None
    if args.precision == "fp16":
        amp = getattr(torch, "amp", None)
        scaler = (amp.GradScaler(device.type) if amp is not None and hasattr(amp, "GradScaler")
                  else torch.cuda.amp.GradScaler())

    def step():
        with autocast():
            loss = loss_fn()
        opt.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        return loss

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(args.warmup):
        step()
    sync()
    runs = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        for _ in range(args.iters):
            loss = step()
        sync()
        runs.append(args.iters * args.batch / (time.perf_counter() - start))
    if args.profile > 0:
        profile_ops(args, torch, step, sync)
    setup = f"{device}/{torch.get_num_threads()}threads" if device.type == "cpu" else str(device)
    fields = dict(unit="img" if shape is not None else "seq",
                  params=sum(p.numel() for p in model.parameters()),
                  throughput=f"{statistics.median(runs):.1f}", runs=",".join(f"{r:.1f}" for r in runs),
                  iters=args.iters, loss=f"{loss.item():.4f}", setup=setup, torch=torch.__version__)
    if shape is None:
        fields["attention"] = model.attention
    return line(args, **fields)


def main(argv):
    args, models = parse_args(argv)
    try:
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    except ImportError as e:
        print(line(args, error=f"PyTorch is not importable by {sys.executable} ({e}); "
                               "apt-get install python3-torch, or pass bench_train.sh --python"))
        return 1
    try:
        if args.params_only:
            for name in models:
                model = build_model(name, args, torch, nn, F)[0]
                args.model = name
                print(line(args, params=sum(p.numel() for p in model.parameters())), flush=True)
            return 0
        print(run(args, torch, nn, F), flush=True)
        return 0
    except Exception as e:  # out of memory, an unsupported setting: a row that says why
        print(line(args, error=f"{type(e).__name__}: {e}".replace("\n", " ")[:300]), flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
