"""Run 73: issue 19's N32 C512 7x7 K512 3x3 layer, one call each of the halo kernel's two best
configurations (runs 15-16: hwn 8x1x8 and hnw 8x8x1, 64 x 64 tiles, 3 stages) and of cuDNN
channels_last, for Nsight Compute (clocks left alone) to say where each kernel's time goes."""
import tilegym_edu  # noqa
import torch
import torch.nn.functional as F
from tilegym_edu.reference import conv_halo
from tilegym_edu.reference import convolution as conv

torch.manual_seed(0)
x = torch.randn(32, 512, 7, 7, device="cuda", dtype=torch.float16).contiguous(
    memory_format=torch.channels_last)
w = (torch.randn(512, 512, 3, 3, device="cuda", dtype=torch.float16) / 48).contiguous(
    memory_format=torch.channels_last)
P, Q = conv.check_conv_inputs(x, w, 1, 1)
ref = F.conv2d(x, w, padding=1)
for row in (("hwn", 8, 1, 8, 64, 64, 3, 1, 4), ("hnw", 8, 8, 1, 64, 64, 3, 1, 4)):
    cfg = dict(zip(conv_halo.HALO_CONV_NAMES, row))
    y = conv.new_output(x, 512, P, Q)
    for _ in range(3):
        conv_halo.launch_halo_conv2d(x, w, y, 1, 1, 1, cfg)
    torch.cuda.synchronize()
    print(row, "max difference", (y.float() - ref.float()).abs().max().item())
for _ in range(3):
    ref = F.conv2d(x, w, padding=1)
torch.cuda.synchronize()
