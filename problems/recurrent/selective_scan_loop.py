"""A small Mamba-style selective-scan block: input projection to (x, z), input-dependent dt, B and C, a diagonal state recurrence over 32 steps, the readout gated by SiLU(z), then an output projection."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 8
seq_len = 32
d_model = 128
d_inner = 256
d_state = 16


class Model(nn.Module):
    def __init__(self, d_model, d_inner, d_state):
        super().__init__()
        self.in_proj = nn.Linear(d_model, 2 * d_inner)
        self.x_proj = nn.Linear(d_inner, 2 * d_state, bias=False)
        self.dt_proj = nn.Linear(d_inner, d_inner)
        self.a_log = nn.Parameter(torch.log(torch.linspace(1.0, 16.0, d_state)).repeat(d_inner, 1))
        self.d = nn.Parameter(torch.ones(d_inner))
        self.out_proj = nn.Linear(d_inner, d_model)

    def forward(self, u):
        xs, z = self.in_proj(u).chunk(2, dim=-1)                    # (B, L, D) each
        xs = F.silu(xs)
        dt = F.softplus(self.dt_proj(xs))                           # (B, L, D)
        bc = self.x_proj(xs)
        b, c = bc[..., :self.a_log.shape[1]], bc[..., self.a_log.shape[1]:]
        a = -torch.exp(self.a_log)                                  # (D, N)
        h = u.new_zeros(u.shape[0], xs.shape[-1], a.shape[1])
        ys = []
        for t in range(u.shape[1]):
            decay = torch.exp(dt[:, t].unsqueeze(-1) * a)            # (B, D, N)
            h = decay * h + (dt[:, t] * xs[:, t]).unsqueeze(-1) * b[:, t].unsqueeze(1)
            ys.append((h * c[:, t].unsqueeze(1)).sum(-1))
        y = torch.stack(ys, dim=1) + self.d * xs
        return self.out_proj(y * F.silu(z))


def get_inputs():
    return [torch.randn(batch_size, seq_len, d_model)]


def get_init_inputs():
    return [d_model, d_inner, d_state]
