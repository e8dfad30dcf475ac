import re,subprocess,sys
def load(f):
    out=subprocess.run(['callgrind_annotate','--threshold=100','--auto=no',f],capture_output=True,text=True).stdout
    d={}
    for line in out.splitlines():
        m=re.match(r'\s*([\d,]+)\s+\([^)]*\)\s+(\S.*)$',line)
        if m:
            v=int(m.group(1).replace(',',''));name=m.group(2)
            name=re.sub(r'^\S*?/(src|sysdeps|nptl|malloc|string|time|socket)/','',name)
            name=re.sub(r' \[.*$','',name)
            d[name]=d.get(name,0)+v
    return d
def per(a,b,n): return {k:(b.get(k,0)-a.get(k,0))/n for k in set(a)|set(b)}
A=per(load(sys.argv[1]),load(sys.argv[2]),3000)
B=per(load(sys.argv[3]),load(sys.argv[4]),3000)
rows=[(k,A.get(k,0),B.get(k,0)) for k in set(A)|set(B)]
rows.sort(key=lambda r:-(r[1]-r[2]))
print('tram total',round(A.get('PROGRAM TOTALS',0)),'floor',round(B.get('PROGRAM TOTALS',0)))
for k,a,b in rows[:int(sys.argv[5])]:
    print(f'{a:7.0f} {b:7.0f} {a-b:7.0f}  {k[:140]}')
print('...')
for k,a,b in rows[-15:]:
    print(f'{a:7.0f} {b:7.0f} {a-b:7.0f}  {k[:140]}')
