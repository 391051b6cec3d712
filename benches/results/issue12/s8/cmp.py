import sys
sys.path.insert(0,'/work/cg4')
from cgparse import parse
a,b=sys.argv[1],sys.argv[2]
n=int(sys.argv[3]) if len(sys.argv)>3 else 30
a1,a2=parse(f'/work/cg4/{a}-E100.out'),parse(f'/work/cg4/{a}-E200.out')
b1,b2=parse(f'/work/cg4/{b}-E100.out'),parse(f'/work/cg4/{b}-E200.out')
def pp(x1,x2): return {k:(x2['excl'].get(k,0)-x1['excl'].get(k,0))/1e5 for k in set(x1['excl'])|set(x2['excl'])}
A,B=pp(a1,a2),pp(b1,b2)
print(f"{a}: {(a2['total']-a1['total'])/1e5:.1f}  {b}: {(b2['total']-b1['total'])/1e5:.1f}")
d={k:B.get(k,0)-A.get(k,0) for k in set(A)|set(B)}
for k,v in sorted(d.items(), key=lambda kv:-abs(kv[1]))[:n]:
    print(f"{v:8.1f}  {A.get(k,0):8.1f} -> {B.get(k,0):8.1f}  {k[:120]}")
