"""Capture of tests/fixtures/captured/fp8_w8a8_decode.pt.trace.json.gz, exactly as run on the H200 (torch 2.11.0+cu130).

A random-init, Llama-shaped W8A8-FP8 stack: 8 layers, hidden 4096, FFN 14336 (fused gate_up), 4 tokens per
step; weights float8_e4m3fn with per-output-channel scales; every GEMM quantizes its bf16 input per token
in torch (abs, amax / 448, div, clamp, cast to float8_e4m3fn, inside record_function("per_token_fp8_quant"))
and runs torch._scaled_mm with row-wise scales. 3 warm-up steps, then 8 `decode (tokens=4)` steps under the
plain torch profiler (record_shapes, with_stack), exported and gzip-9ed into $OUT. No attention, no KV cache.
"""
import torch,sys,os
from torch.profiler import profile,ProfilerActivity,record_function,schedule
M=448.0;d="cuda";h,f,L,T=4096,14336,8,4
torch.manual_seed(0)
def W(o,i):
 w=torch.randn(o,i,device=d,dtype=torch.bfloat16)*0.02
 s=(w.abs().amax(1,keepdim=True).float()/M).clamp(min=1e-12)
 return (w.float()/s).to(torch.float8_e4m3fn).t(),s.t().contiguous()
def lin(x,w):
 with record_function("per_token_fp8_quant"):
  sx=(x.abs().amax(-1,keepdim=True).float()/M).clamp(min=1e-12)
  xq=(x.float()/sx).to(torch.float8_e4m3fn)
 return torch._scaled_mm(xq,w[0],scale_a=sx,scale_b=w[1],out_dtype=torch.bfloat16)
def rms(x):return x*torch.rsqrt(x.float().pow(2).mean(-1,keepdim=True)+1e-6).to(x.dtype)
Ls=[dict(qkv=W(3*h,h),o=W(h,h),gu=W(2*f,h),dn=W(h,f)) for _ in range(L)]
x0=torch.randn(T,h,device=d,dtype=torch.bfloat16)
def step():
 x=x0
 for w in Ls:
  q=lin(rms(x),w["qkv"]);x=x+lin(q[:,:h].contiguous(),w["o"])
  g=lin(rms(x),w["gu"]);x=x+lin((torch.nn.functional.silu(g[:,:f])*g[:,f:]).contiguous(),w["dn"])
 torch.cuda.synchronize()
for _ in range(3):step()
with profile(activities=[ProfilerActivity.CPU,ProfilerActivity.CUDA],record_shapes=True,with_stack=True) as p:
 for _ in range(8):
  with record_function(f"decode (tokens={T})"):step()
o=os.environ["OUT"]+"/fp8_w8a8_decode.pt.trace.json";p.export_chrome_trace(o);os.system("gzip -9 "+o)
print(torch.__version__)
