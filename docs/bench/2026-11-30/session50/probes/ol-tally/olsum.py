import json,sys,glob,os,statistics as S
for d in sys.argv[1:]:
    j=json.load(open(glob.glob(os.path.join(d,'*.json'))[0]))
    print('==',d)
    for s in j['systems']:
        cells=[]
        for st in s['steps']:
            med=S.median(st['p999_rounds_us'])
            cells.append(f"{st['rate']/1e3:.0f}k:{st['achieved']/1e3:.0f}k/{med/1e3:.1f}ms/{st['client_cpu_us']['median']:.2f}")
        print(' ',s['system'][:5],' '.join(cells))
