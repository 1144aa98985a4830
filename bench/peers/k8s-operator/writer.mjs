// The @dot-i/k8s-operator side of kinformer's API-bound controller benchmark
// (bench/manager_writes_bench.lua, `make bench-manager-peer`): the same controller as the
// kinformer one, written the way this framework's README writes one, measured in one process
// against the fake API server and printed as one line of key=value pairs.
//
//   KUBECONFIG=FILE node writer.mjs NAMESPACE OBJECTS SERVER_PID
//
// The controller: an Operator subclass whose init() watches the ConfigMaps of NAMESPACE
// (watchResource); its handler, for every ADDED or MODIFIED event, makes one write of the
// event's object: a JSON merge PATCH setting the annotation bench.kinformer.io/data-bytes to
// the total length of the object's data values (the value kinformer's reconcile writes).
// The write goes through the CoreV1Api the framework builds from the kubeconfig (this.k8sApi:
// @kubernetes/client-node 0.20, the framework's dependency).
//
// Concurrency: the framework offers none to choose. Every event of every watch goes through
// one async.queue created without a concurrency argument (async's default: 1), so handlers run
// one at a time, each awaited before the next event is handed out.
//
// Measured from the first handler call (the watch's initial ADDED events then arrive much
// faster than handlers finish) until OBJECTS distinct ConfigMaps were written: writes/s,
// this process's CPU time and the server's (from /proc/SERVER_PID/stat) over that window, and
// the peak RSS of this process (VmHWM). Then it exits.
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';

const require = createRequire(import.meta.url);
const Operator = require('@dot-i/k8s-operator').default;
const FRAMEWORK = require('@dot-i/k8s-operator/package.json').version;

const [ns, objectsArg, serverPidArg] = process.argv.slice(2);
const objects = Number(objectsArg);
const serverPid = Number(serverPidArg);
if (!ns || !(objects > 0) || !(serverPid > 0)) {
  process.stderr.write('usage: KUBECONFIG=FILE node writer.mjs NAMESPACE OBJECTS SERVER_PID\n');
  process.exit(2);
}

const ANNOTATION = 'bench.kinformer.io/data-bytes';
const MERGE = { headers: { 'Content-Type': 'application/merge-patch+json' } };
const TICKS = 100; // USER_HZ: /proc/PID/stat counts CPU time in 1/100 s on Linux

const now = () => performance.now() / 1000;

function serverCpu() {
  const fields = readFileSync(`/proc/${serverPid}/stat`, 'utf8').replace(/^.*\) /s, '').split(' ');
  return (Number(fields[11]) + Number(fields[12])) / TICKS; // utime + stime, seconds
}

function peakRssMb() {
  const m = readFileSync('/proc/self/status', 'utf8').match(/^VmHWM:\s+(\d+)/m);
  return m ? Number(m[1]) / 1024 : NaN;
}

function dataBytes(obj) {
  let n = 0;
  for (const v of Object.values(obj.data || {})) n += Buffer.byteLength(String(v));
  return n;
}

let t0; let cpu0; let srv0;
let writes = 0; let failures = 0; let firstError = '';
const written = new Set();

function finish() {
  const dt = now() - t0;
  const cpu = process.cpuUsage(cpu0);
  const out = {
    framework: FRAMEWORK, node: process.version, objects, seconds: dt.toFixed(6),
    rate: (objects / dt).toFixed(1), writes, failures,
    client_cpu: ((cpu.user + cpu.system) / 1e6).toFixed(3),
    server_cpu: (serverCpu() - srv0).toFixed(3), rss: peakRssMb().toFixed(1),
  };
  if (firstError) out.error = JSON.stringify(firstError);
  process.stdout.write(`${Object.entries(out).map(([k, v]) => `${k}=${v}`).join(' ')}\n`);
  process.exit(0);
}

class Writer extends Operator {
  async init() {
    await this.watchResource('', 'v1', 'configmaps', (e) => this.reconcile(e), ns);
  }

  async reconcile(e) {
    if (e.type !== 'ADDED' && e.type !== 'MODIFIED') return;
    if (t0 === undefined) {
      t0 = now();
      cpu0 = process.cpuUsage();
      srv0 = serverCpu();
    }
    const want = String(dataBytes(e.object));
    const ann = e.object.metadata.annotations;
    if (ann && ann[ANNOTATION] === want) return; // written: nothing to do (its own write's event)
    const patch = { metadata: { annotations: { [ANNOTATION]: want } } };
    try {
      await this.k8sApi.patchNamespacedConfigMap(e.meta.name, e.meta.namespace, patch,
        undefined, undefined, undefined, undefined, undefined, MERGE);
    } catch (err) {
      failures += 1;
      if (!firstError) firstError = String(err?.body?.message || err?.message || err);
      return;
    }
    writes += 1;
    if (!written.has(e.meta.name)) {
      written.add(e.meta.name);
      if (written.size === objects) finish();
    }
  }
}

await new Writer().start();
