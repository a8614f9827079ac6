import json,glob,statistics,sys,os,re
d=sys.argv[1]; kind=sys.argv[2] if len(sys.argv)>2 else 'tg'
runs={}
for f in glob.glob(d+f'/{kind}-*.json'):
    m=re.match(kind+r'-(new|old)-(\d+)',os.path.basename(f)[:-5]); ver,r=m.groups()
    for v in json.load(open(f))['variants']:
        vals=[s['prefill_tps' if kind.startswith('pp') else 'decode_tps'] for s in v['samples']]
        runs.setdefault(v['variant'].split('@')[1],{}).setdefault(int(r),{})[ver]=statistics.median(vals)
for b,rs in sorted(runs.items()):
    ratios=[rs[r]['new']/rs[r]['old'] for r in sorted(rs) if 'new' in rs[r] and 'old' in rs[r]]
    print(b, 'new/old per pair:', ' '.join(f'{x:.3f}' for x in ratios), ' median', f'{statistics.median(ratios):.3f}')
