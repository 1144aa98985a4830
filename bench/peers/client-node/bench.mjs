// The client-node side of kinformer's peer benchmark (bench/peers_bench.lua, `make bench`): one
// measurement per process against the fake API server, printed as one line of key=value pairs
// (the same shape as the kinformer children of bench/informer_bench.lua).
//
//   node --expose-gc bench.mjs sync    URL [paged] [lookups] [relist]   S1 (+ S3, + S4)
//   node --expose-gc bench.mjs events  URL N none|name [paged]          S2: N MODIFIED events
//   node --expose-gc bench.mjs latency URL RATE N [paged]               S2: handler latency
//
// The informer is the one client-node documents: makeInformer(kc, '/api/v1/pods',
// () => coreV1.listPodForAllNamespaces()), i.e. one unpaginated list decoded into the typed
// models, then a watch from its resourceVersion. That list is read as one JS string, which V8
// caps at 2^29-24 characters (~537 MB): 100k realistic pods (900 MB) fail with
// ERR_STRING_TOO_LONG, and the informer then reports the error and stops (start() still
// resolves). With `paged` the list function follows `continue` in pages of 500 (kinformer's
// page size) and hands ListWatch one V1PodList of all the items, the workaround a user needs.
// The cache is ListWatch's per-namespace Maps: get(name, namespace) and list(namespace) (the
// nearest thing it has to by_index). Peak RSS is VmHWM of this process; RSS is reset with
// /proc/self/clear_refs before the relist. A failed list prints failed=CODE and exits 3.
import * as k8s from '@kubernetes/client-node';
import { readFileSync, writeFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';

const [mode, url, ...args] = process.argv.slice(2);
const flags = new Set(args.filter((a) => /^[a-z]+$/.test(a)));
const rest = args.filter((a) => !/^[a-z]+$/.test(a) || a === 'none' || a === 'name');
if (!mode || !url) {
  process.stderr.write('usage: bench.mjs sync|events|latency URL ...\n');
  process.exit(2);
}

const now = () => performance.now() / 1000; // seconds, monotonic
const wall = () => (performance.timeOrigin + performance.now()) / 1000; // Unix seconds
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function procStatus(key) {
  const m = readFileSync('/proc/self/status', 'utf8').match(new RegExp(`^${key}:\\s+(\\d+)`, 'm'));
  return m ? Number(m[1]) / 1024 : NaN; // MB
}

async function control(method, path, body) {
  const res = await fetch(url + path, {
    method,
    headers: body ? { 'Content-Type': 'application/json' } : {},
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`${method} ${path}: ${res.status} ${text}`);
  return JSON.parse(text);
}

function gc() {
  if (global.gc) {
    global.gc();
    global.gc();
  }
}

const kc = new k8s.KubeConfig();
kc.loadFromOptions({
  clusters: [{ name: 'fake', server: url, skipTLSVerify: true }],
  users: [{ name: 'bench' }],
  contexts: [{ name: 'fake', cluster: 'fake', user: 'bench' }],
  currentContext: 'fake',
});
const core = kc.makeApiClient(k8s.CoreV1Api);
let lists = 0;
async function pagedList() {
  const items = [];
  let page;
  let token;
  do {
    page = await core.listPodForAllNamespaces({ limit: 500, _continue: token });
    for (const item of page.items) items.push(item);
    token = page.metadata && page.metadata._continue;
  } while (token);
  page.items = items;
  return page;
}
const informer = k8s.makeInformer(kc, '/api/v1/pods', async () => {
  const list = flags.has('paged') ? await pagedList() : await core.listPodForAllNamespaces();
  lists++;
  return list;
});
let errors = 0;
let lastError;
informer.on('error', (err) => {
  errors++;
  lastError = err;
  process.stderr.write(`informer error: ${err && err.message}\n`);
});

const out = {};
function emit() {
  out.errors = errors;
  process.stdout.write(
    Object.keys(out)
      .sort()
      .map((k) => `${k}=${typeof out[k] === 'number' ? +out[k].toFixed(6) : out[k]}`)
      .join(' ') + '\n',
  );
}

class ListFailed extends Error {}

async function startSynced() {
  const t0 = now();
  await informer.start(); // resolves after the list is in the cache and the watch is open
  out.sync_s = now() - t0;
  // ... or after the list failed: ListWatch reports it to 'error' and does not retry.
  if (lists === 0) throw new ListFailed((lastError && (lastError.code || lastError.name)) || 'list failed');
}

async function modeSync(opts) {
  if (opts.has('relist')) {
    // The first watch of this process gets one event, then ERROR 410 (Expired), then the end of
    // the stream: client-node then relists.
    await control('DELETE', '/_fake/faults');
    await control('POST', '/_fake/faults', {
      watch: true, times: 1, after_events: 1,
      action: { type: 'error_event', code: 410, reason: 'Expired',
                message: 'too old resource version' },
    });
  }
  await startSynced();
  out.rss_mb = procStatus('VmHWM');
  out.objects = informer.list().length;

  if (opts.has('lookups')) {
    const keys = informer.list().map((o) => [o.metadata.name, o.metadata.namespace]);
    const nk = keys.length;
    if (nk === 0) throw new Error('lookups: the cache is empty');
    const total = Math.max(nk * 10, 200000);
    const rounds = Math.ceil(total / nk);
    let found = 0;
    let t = now();
    for (let r = 0; r < rounds; r++) {
      for (let i = 0; i < nk; i++) if (informer.get(keys[i][0], keys[i][1])) found++;
    }
    out.get_s = now() - t;
    out.get_n = rounds * nk;
    if (found !== out.get_n) throw new Error(`get: ${found} of ${out.get_n} found`);
    const nss = [...new Set(keys.map((k) => k[1]))].sort();
    for (const ns of nss) informer.list(ns); // warm
    const budget = nk >= 20000 ? 1.0 : 0.2;
    let calls = 0;
    let objs = 0;
    t = now();
    do {
      for (const ns of nss) {
        objs += informer.list(ns).length;
        calls++;
      }
    } while (now() - t < budget);
    out.idx_s = now() - t;
    out.idx_n = calls;
    out.idx_objs = objs;
    // list(): every object.
    informer.list();
    calls = 0;
    t = now();
    do {
      objs += informer.list().length;
      calls++;
    } while (now() - t < budget);
    out.list_rate = calls / (now() - t);
    out.namespaces = nss.length;
  }

  if (opts.has('relist')) {
    gc();
    await sleep(1000);
    gc();
    out.steady_rss_mb = procStatus('VmRSS');
    writeFileSync('/proc/self/clear_refs', '5'); // VmHWM := VmRSS
    const t1 = now();
    await control('POST', '/_fake/modify', { resource: 'pods', count: 1 });
    // lists becomes 2 when the relist's response is decoded; the cache is rebuilt from it in
    // the same continuation, before any timer runs.
    while (lists < 2) await sleep(2);
    await sleep(0);
    out.relist_s = now() - t1;
    out.relist_peak_rss_mb = procStatus('VmHWM');
    out.relist_objects = informer.list().length;
    gc();
    out.after_rss_mb = procStatus('VmRSS');
  }
  await informer.stop();
}

async function modeEvents(n, handler) {
  let seen = 0;
  if (handler === 'name') {
    const read = (obj) => {
      const name = obj.metadata.name;
      if (name) seen++;
    };
    informer.on('add', read);
    informer.on('update', read);
  } else if (handler !== 'none') {
    throw new Error(`unknown handler ${handler}`);
  }
  await startSynced();
  const base = seen;
  await control('POST', '/_fake/modify', { resource: 'pods', count: n, hold: true });
  gc();
  const t1 = now();
  const release = control('POST', '/_fake/release');
  const rel = await release;
  const last = rel.last_resourceVersion;
  if (handler === 'name') {
    while (seen - base < n) await sleep(1);
    out.events = seen - base;
  } else {
    // No handler: done when the cache holds the burst's last resourceVersion.
    while (informer.latestResourceVersion() !== last) await sleep(1);
    out.events = n;
  }
  out.events_s = now() - t1;
  out.rss_mb = procStatus('VmHWM');
  await informer.stop();
}

async function modeLatency(rate, n) {
  const lat = new Float64Array(n);
  let seen = 0;
  informer.on('update', (obj) => {
    const a = obj.metadata.annotations;
    const stamp = a && a['fake.kinformer.io/touched-at'];
    if (stamp && seen < n) lat[seen++] = wall() - Number(stamp);
  });
  await startSynced();
  gc();
  const t1 = now();
  await control('POST', '/_fake/modify', { resource: 'pods', count: n, rate });
  while (seen < n) await sleep(5);
  out.latency_run_s = now() - t1;
  lat.sort();
  out.events = seen;
  out.p50_ms = lat[Math.floor(0.5 * (n - 1))] * 1000;
  out.p99_ms = lat[Math.floor(0.99 * (n - 1))] * 1000;
  out.max_ms = lat[n - 1] * 1000;
  await informer.stop();
}

try {
  if (mode === 'sync') await modeSync(flags);
  else if (mode === 'events') await modeEvents(Number(rest[0]), rest[1] || 'none');
  else if (mode === 'latency') await modeLatency(Number(rest[0]), Number(rest[1]));
  else throw new Error(`unknown mode ${mode}`);
  emit();
  process.exit(0);
} catch (err) {
  if (err instanceof ListFailed) {
    out.failed = err.message;
    out.failed_after_s = out.sync_s;
    delete out.sync_s;
    emit();
    process.exit(3);
  }
  process.stderr.write(`client-node bench failed: ${err && err.stack}\n`);
  process.exit(1);
}
