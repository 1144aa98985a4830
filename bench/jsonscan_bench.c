/*
 * jsonscan_bench.c - throughput of the streaming JSON scanner (csrc/jsonscan.c).
 *
 * Synthesises a realistic pod list (a Deployment's pods: labels, ownerReferences, two containers
 * with env / ports / resources / probes, status conditions and containerStatuses, and three
 * managedFields entries with fieldsV1; about 9.7 KB per pod with managedFields, 5.4 KB without)
 * and a watch stream of MODIFIED events of the same pods, then feeds them to the scanner in
 * 16 KiB chunks, each first copied into one reused staging buffer the way libcurl hands over
 * received data. Reports MB/s (10^6 bytes of input) and items/s, best of 3 runs (or `reps`):
 *   - list mode: no flags, strip managedFields, strip + inject kind (what an informer uses),
 *     and strip + inject + kinf_object_new/unref per item (the reflector's full C-side work);
 *   - watch mode: MODIFIED lines, no flags and strip;
 *   - for comparison, "stage 1 only (SSE2)": the first pass of a two-stage SIMD scanner in the
 *     style of simdjson (quote, backslash, control and structural bitmaps per 64 bytes, strings
 *     masked by a prefix XOR, the structural positions written to an index) over the same list
 *     bytes. Such a scanner still needs a second pass over that index to validate and extract,
 *     so this row is a lower bound on its time with SSE2, the x86-64 baseline the library is
 *     built for (bench/README.md, "Tried and dropped": why the scanner was not rewritten so).
 *
 *   make bench-jsonscan            (or: cc -O2 -Icsrc bench/jsonscan_bench.c csrc/jsonscan.c
 *                                   csrc/kinf.c csrc/object.c -o jsonscan_bench)
 *   build/bench/jsonscan_bench [pods=100000] [watch_events=200000] [chunk=16384] [reps=3]
 */
#include "jsonscan.h"
#include "object.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One pod as the API server sends it in a watch event (compact JSON). Placeholders: $SFX$ pod
 * name suffix, $NS$ namespace number, $UID$, $RV$, $NODE$ node number, $IP$ last octet. */
static const char pod_template[] =
    "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"web-frontend-7c9d8f6b5d-$SFX$\",\"generate"
    "Name\":\"web-frontend-7c9d8f6b5d-\",\"namespace\":\"team-$NS$\",\"uid\":\"$UID$\",\"resourceVersion\":\"$R"
    "V$\",\"creationTimestamp\":\"2024-05-14T09:21:37Z\",\"labels\":{\"app\":\"web-frontend\",\"app.kubernete"
    "s.io/name\":\"web-frontend\",\"pod-template-hash\":\"7c9d8f6b5d\",\"team\":\"storefront\"},\"annotations"
    "\":{\"prometheus.io/scrape\":\"true\",\"prometheus.io/port\":\"9090\"},\"ownerReferences\":[{\"apiVersio"
    "n\":\"apps/v1\",\"kind\":\"ReplicaSet\",\"name\":\"web-frontend-7c9d8f6b5d\",\"uid\":\"5e0b7d9c-3a2f-4e1b-"
    "9c8d-7a6b5c4d3e2f\",\"controller\":true,\"blockOwnerDeletion\":true}],\"managedFields\":[{\"manager\""
    ":\"kube-controller-manager\",\"operation\":\"Update\",\"apiVersion\":\"v1\",\"time\":\"2024-05-14T09:21:3"
    "7Z\",\"fieldsType\":\"FieldsV1\",\"fieldsV1\":{\"f:metadata\":{\"f:generateName\":{},\"f:labels\":{\".\":{}"
    ",\"f:app\":{},\"f:app.kubernetes.io/name\":{},\"f:pod-template-hash\":{},\"f:team\":{}},\"f:annotatio"
    "ns\":{\".\":{},\"f:prometheus.io/scrape\":{},\"f:prometheus.io/port\":{},\"f:kubectl.kubernetes.io/r"
    "estartedAt\":{}},\"f:ownerReferences\":{\".\":{},\"k:{\\\"uid\\\":\\\"5e0b7d9c-3a2f-4e1b-9c8d-7a6b5c4d3e"
    "2f\\\"}\":{}}},\"f:spec\":{\"f:containers\":{\"k:{\\\"name\\\":\\\"app\\\"}\":{\".\":{},\"f:args\":{},\"f:command\""
    ":{},\"f:env\":{\".\":{},\"k:{\\\"name\\\":\\\"APP_SETTING_0\\\"}\":{\".\":{},\"f:name\":{},\"f:value\":{}},\"k:{\\"
    "\"name\\\":\\\"APP_SETTING_1\\\"}\":{\".\":{},\"f:name\":{},\"f:value\":{}},\"k:{\\\"name\\\":\\\"APP_SETTING_2\\\""
    "}\":{\".\":{},\"f:name\":{},\"f:value\":{}},\"k:{\\\"name\\\":\\\"APP_SETTING_3\\\"}\":{\".\":{},\"f:name\":{},\"f"
    ":value\":{}},\"k:{\\\"name\\\":\\\"APP_SETTING_4\\\"}\":{\".\":{},\"f:name\":{},\"f:value\":{}},\"k:{\\\"name\\\":"
    "\\\"APP_SETTING_5\\\"}\":{\".\":{},\"f:name\":{},\"f:value\":{}},\"k:{\\\"name\\\":\\\"POD_NAME\\\"}\":{\".\":{},\"f"
    ":name\":{},\"f:valueFrom\":{\".\":{},\"f:fieldRef\":{}}},\"k:{\\\"name\\\":\\\"POD_IP\\\"}\":{\".\":{},\"f:name\""
    ":{},\"f:valueFrom\":{\".\":{},\"f:fieldRef\":{}}}},\"f:image\":{},\"f:imagePullPolicy\":{},\"f:liveness"
    "Probe\":{\".\":{},\"f:failureThreshold\":{},\"f:httpGet\":{\".\":{},\"f:path\":{},\"f:port\":{},\"f:scheme"
    "\":{}},\"f:initialDelaySeconds\":{},\"f:periodSeconds\":{},\"f:successThreshold\":{},\"f:timeoutSeco"
    "nds\":{}},\"f:name\":{},\"f:ports\":{\".\":{},\"k:{\\\"containerPort\\\":8080,\\\"protocol\\\":\\\"TCP\\\"}\":{\"."
    "\":{},\"f:containerPort\":{},\"f:name\":{},\"f:protocol\":{}},\"k:{\\\"containerPort\\\":9090,\\\"protocol"
    "\\\":\\\"TCP\\\"}\":{\".\":{},\"f:containerPort\":{},\"f:name\":{},\"f:protocol\":{}}},\"f:readinessProbe\":{"
    "\".\":{},\"f:failureThreshold\":{},\"f:httpGet\":{\".\":{},\"f:path\":{},\"f:port\":{},\"f:scheme\":{}},\"f"
    ":periodSeconds\":{},\"f:successThreshold\":{},\"f:timeoutSeconds\":{}},\"f:resources\":{\".\":{},\"f:l"
    "imits\":{\".\":{},\"f:cpu\":{},\"f:memory\":{}},\"f:requests\":{\".\":{},\"f:cpu\":{},\"f:memory\":{}}},\"f:"
    "securityContext\":{\".\":{},\"f:allowPrivilegeEscalation\":{},\"f:capabilities\":{\".\":{},\"f:drop\":{"
    "}},\"f:readOnlyRootFilesystem\":{},\"f:runAsNonRoot\":{}},\"f:terminationMessagePath\":{},\"f:termi"
    "nationMessagePolicy\":{},\"f:volumeMounts\":{\".\":{},\"k:{\\\"mountPath\\\":\\\"/etc/app\\\"}\":{\".\":{},\"f"
    ":mountPath\":{},\"f:name\":{},\"f:readOnly\":{}}}},\"k:{\\\"name\\\":\\\"log-shipper\\\"}\":{\".\":{},\"f:args"
    "\":{},\"f:image\":{},\"f:imagePullPolicy\":{},\"f:name\":{},\"f:resources\":{\".\":{},\"f:limits\":{\".\":{"
    "},\"f:cpu\":{},\"f:memory\":{}},\"f:requests\":{\".\":{},\"f:cpu\":{},\"f:memory\":{}}},\"f:terminationMe"
    "ssagePath\":{},\"f:terminationMessagePolicy\":{}}},\"f:dnsPolicy\":{},\"f:enableServiceLinks\":{},\""
    "f:restartPolicy\":{},\"f:schedulerName\":{},\"f:serviceAccount\":{},\"f:serviceAccountName\":{},\"f:"
    "terminationGracePeriodSeconds\":{},\"f:securityContext\":{\".\":{},\"f:fsGroup\":{},\"f:runAsGroup\":"
    "{},\"f:runAsUser\":{}},\"f:tolerations\":{},\"f:priority\":{},\"f:preemptionPolicy\":{},\"f:nodeName\""
    ":{},\"f:volumes\":{\".\":{},\"k:{\\\"name\\\":\\\"config\\\"}\":{\".\":{},\"f:configMap\":{\".\":{},\"f:defaultMo"
    "de\":{},\"f:name\":{}},\"f:name\":{}}}}}},{\"manager\":\"kube-scheduler\",\"operation\":\"Update\",\"apiVe"
    "rsion\":\"v1\",\"time\":\"2024-05-14T09:21:37Z\",\"fieldsType\":\"FieldsV1\",\"fieldsV1\":{\"f:status\":{\"f"
    ":conditions\":{\".\":{},\"k:{\\\"type\\\":\\\"PodScheduled\\\"}\":{\".\":{},\"f:lastProbeTime\":{},\"f:lastTra"
    "nsitionTime\":{},\"f:message\":{},\"f:reason\":{},\"f:status\":{},\"f:type\":{}}}}},\"subresource\":\"st"
    "atus\"},{\"manager\":\"kubelet\",\"operation\":\"Update\",\"apiVersion\":\"v1\",\"time\":\"2024-05-14T09:21:"
    "37Z\",\"fieldsType\":\"FieldsV1\",\"fieldsV1\":{\"f:status\":{\"f:conditions\":{\"k:{\\\"type\\\":\\\"Containe"
    "rsReady\\\"}\":{\".\":{},\"f:lastProbeTime\":{},\"f:lastTransitionTime\":{},\"f:status\":{},\"f:type\":{}"
    "},\"k:{\\\"type\\\":\\\"Initialized\\\"}\":{\".\":{},\"f:lastProbeTime\":{},\"f:lastTransitionTime\":{},\"f:s"
    "tatus\":{},\"f:type\":{}},\"k:{\\\"type\\\":\\\"PodReadyToStartContainers\\\"}\":{\".\":{},\"f:lastProbeTime"
    "\":{},\"f:lastTransitionTime\":{},\"f:status\":{},\"f:type\":{}},\"k:{\\\"type\\\":\\\"Ready\\\"}\":{\".\":{},\""
    "f:lastProbeTime\":{},\"f:lastTransitionTime\":{},\"f:status\":{},\"f:type\":{}}},\"f:containerStatus"
    "es\":{},\"f:initContainerStatuses\":{},\"f:qosClass\":{},\"f:message\":{},\"f:reason\":{},\"f:nominate"
    "dNodeName\":{},\"f:resize\":{},\"f:ephemeralContainerStatuses\":{},\"f:resourceClaimStatuses\":{},\""
    "f:hostIP\":{},\"f:hostIPs\":{},\"f:phase\":{},\"f:podIP\":{},\"f:podIPs\":{\".\":{},\"k:{\\\"ip\\\":\\\"10.244"
    ".$NODE$.$IP$\\\"}\":{\".\":{},\"f:ip\":{}}},\"f:startTime\":{}}},\"subresource\":\"status\"}]},\"spec\":{\"v"
    "olumes\":[{\"name\":\"config\",\"configMap\":{\"name\":\"web-frontend-config\",\"defaultMode\":420}},{\"na"
    "me\":\"kube-api-access-$SFX$\",\"projected\":{\"sources\":[{\"serviceAccountToken\":{\"expirationSecon"
    "ds\":3607,\"path\":\"token\"}},{\"configMap\":{\"name\":\"kube-root-ca.crt\",\"items\":[{\"key\":\"ca.crt\",\""
    "path\":\"ca.crt\"}]}},{\"downwardAPI\":{\"items\":[{\"path\":\"namespace\",\"fieldRef\":{\"apiVersion\":\"v1"
    "\",\"fieldPath\":\"metadata.namespace\"}}]}}],\"defaultMode\":420}}],\"containers\":[{\"name\":\"app\",\"i"
    "mage\":\"reg.example.io/team/web-frontend:v1.27.3\",\"args\":[\"--port=8080\",\"--metrics-port=9090\""
    ",\"--log-level=info\"],\"ports\":[{\"name\":\"http\",\"containerPort\":8080,\"protocol\":\"TCP\"},{\"name\":"
    "\"metrics\",\"containerPort\":9090,\"protocol\":\"TCP\"}],\"env\":[{\"name\":\"APP_SETTING_0\",\"value\":\"va"
    "lue-0-abcdefghij\"},{\"name\":\"APP_SETTING_1\",\"value\":\"value-1-abcdefghij\"},{\"name\":\"APP_SETTIN"
    "G_2\",\"value\":\"value-2-abcdefghij\"},{\"name\":\"APP_SETTING_3\",\"value\":\"value-3-abcdefghij\"},{\"n"
    "ame\":\"APP_SETTING_4\",\"value\":\"value-4-abcdefghij\"},{\"name\":\"APP_SETTING_5\",\"value\":\"value-5-"
    "abcdefghij\"},{\"name\":\"POD_NAME\",\"valueFrom\":{\"fieldRef\":{\"apiVersion\":\"v1\",\"fieldPath\":\"meta"
    "data.name\"}}},{\"name\":\"POD_IP\",\"valueFrom\":{\"fieldRef\":{\"apiVersion\":\"v1\",\"fieldPath\":\"statu"
    "s.podIP\"}}}],\"resources\":{\"limits\":{\"cpu\":\"1\",\"memory\":\"512Mi\"},\"requests\":{\"cpu\":\"250m\",\"me"
    "mory\":\"256Mi\"}},\"volumeMounts\":[{\"name\":\"config\",\"mountPath\":\"/etc/app\",\"readOnly\":true},{\"n"
    "ame\":\"kube-api-access-$SFX$\",\"readOnly\":true,\"mountPath\":\"/var/run/secrets/kubernetes.io/ser"
    "viceaccount\"}],\"livenessProbe\":{\"httpGet\":{\"path\":\"/healthz\",\"port\":8080,\"scheme\":\"HTTP\"},\"i"
    "nitialDelaySeconds\":10,\"timeoutSeconds\":1,\"periodSeconds\":10,\"successThreshold\":1,\"failureTh"
    "reshold\":3},\"readinessProbe\":{\"httpGet\":{\"path\":\"/ready\",\"port\":8080,\"scheme\":\"HTTP\"},\"timeo"
    "utSeconds\":1,\"periodSeconds\":5,\"successThreshold\":1,\"failureThreshold\":3},\"terminationMessag"
    "ePath\":\"/dev/termination-log\",\"terminationMessagePolicy\":\"File\",\"imagePullPolicy\":\"IfNotPres"
    "ent\",\"securityContext\":{\"capabilities\":{\"drop\":[\"ALL\"]},\"runAsNonRoot\":true,\"readOnlyRootFil"
    "esystem\":true,\"allowPrivilegeEscalation\":false}},{\"name\":\"log-shipper\",\"image\":\"reg.example."
    "io/infra/fluent-bit:2.1.8\",\"args\":[\"-c\",\"/fluent-bit/etc/fluent-bit.conf\"],\"resources\":{\"lim"
    "its\":{\"cpu\":\"100m\",\"memory\":\"64Mi\"},\"requests\":{\"cpu\":\"10m\",\"memory\":\"32Mi\"}},\"volumeMounts\""
    ":[{\"name\":\"kube-api-access-$SFX$\",\"readOnly\":true,\"mountPath\":\"/var/run/secrets/kubernetes.i"
    "o/serviceaccount\"}],\"terminationMessagePath\":\"/dev/termination-log\",\"terminationMessagePolic"
    "y\":\"File\",\"imagePullPolicy\":\"IfNotPresent\"}],\"restartPolicy\":\"Always\",\"terminationGracePerio"
    "dSeconds\":30,\"dnsPolicy\":\"ClusterFirst\",\"serviceAccountName\":\"web-frontend\",\"serviceAccount\""
    ":\"web-frontend\",\"nodeName\":\"node-$NODE$.cluster.example.com\",\"securityContext\":{\"runAsUser\":"
    "10001,\"runAsGroup\":10001,\"fsGroup\":10001},\"schedulerName\":\"default-scheduler\",\"tolerations\":"
    "[{\"key\":\"node.kubernetes.io/not-ready\",\"operator\":\"Exists\",\"effect\":\"NoExecute\",\"tolerationS"
    "econds\":300},{\"key\":\"node.kubernetes.io/unreachable\",\"operator\":\"Exists\",\"effect\":\"NoExecute"
    "\",\"tolerationSeconds\":300}],\"priority\":0,\"enableServiceLinks\":true,\"preemptionPolicy\":\"Preem"
    "ptLowerPriority\"},\"status\":{\"phase\":\"Running\",\"conditions\":[{\"type\":\"PodReadyToStartContaine"
    "rs\",\"status\":\"True\",\"lastProbeTime\":null,\"lastTransitionTime\":\"2024-05-14T09:21:37Z\"},{\"type"
    "\":\"Initialized\",\"status\":\"True\",\"lastProbeTime\":null,\"lastTransitionTime\":\"2024-05-14T09:21:"
    "37Z\"},{\"type\":\"Ready\",\"status\":\"True\",\"lastProbeTime\":null,\"lastTransitionTime\":\"2024-05-14T"
    "09:21:37Z\"},{\"type\":\"ContainersReady\",\"status\":\"True\",\"lastProbeTime\":null,\"lastTransitionTi"
    "me\":\"2024-05-14T09:21:37Z\"},{\"type\":\"PodScheduled\",\"status\":\"True\",\"lastProbeTime\":null,\"las"
    "tTransitionTime\":\"2024-05-14T09:21:37Z\"}],\"hostIP\":\"10.0.$NODE$.17\",\"hostIPs\":[{\"ip\":\"10.0.$"
    "NODE$.17\"}],\"podIP\":\"10.244.$NODE$.$IP$\",\"podIPs\":[{\"ip\":\"10.244.$NODE$.$IP$\"}],\"startTime\":"
    "\"2024-05-14T09:21:37Z\",\"containerStatuses\":[{\"name\":\"app\",\"state\":{\"running\":{\"startedAt\":\"2"
    "024-05-14T09:21:37Z\"}},\"lastState\":{},\"ready\":true,\"restartCount\":0,\"image\":\"reg.example.io/"
    "team/web-frontend:v1.27.3\",\"imageID\":\"reg.example.io/team/web-frontend@sha256:3f1c0d6e5b2a4c"
    "8d9e7f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d\",\"containerID\":\"containerd://8a7b6c5d4e3f"
    "2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b\",\"started\":true},{\"name\":\"log-shipper\","
    "\"state\":{\"running\":{\"startedAt\":\"2024-05-14T09:21:37Z\"}},\"lastState\":{},\"ready\":true,\"restar"
    "tCount\":1,\"image\":\"reg.example.io/infra/fluent-bit:2.1.8\",\"imageID\":\"reg.example.io/infra/fl"
    "uent-bit@sha256:3f1c0d6e5b2a4c8d9e7f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d\",\"container"
    "ID\":\"containerd://8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b\",\"started"
    "\":true}],\"qosClass\":\"Burstable\"}}";

typedef struct buf {
    char *p;
    size_t len, cap;
} buf;

static void add(buf *b, const char *s, size_t n)
{
    if (b->len + n > b->cap) {
        size_t nc = b->cap ? b->cap : 1 << 20;
        while (nc < b->len + n)
            nc *= 2;
        b->p = realloc(b->p, nc);
        if (b->p == NULL) {
            fprintf(stderr, "out of memory\n");
            exit(1);
        }
        b->cap = nc;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void adds(buf *b, const char *s)
{
    add(b, s, strlen(s));
}

/* Appends pod i (list items have no kind/apiVersion, as real list responses). */
static void add_pod(buf *b, unsigned i, unsigned rv, int for_list)
{
    const char *t = pod_template, *at;
    char v[64];
    if (for_list) {
        const char *lead = "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",";
        t += strlen(lead) - 1;
        add(b, "{", 1);
        t++;
    }
    while ((at = strchr(t, '$')) != NULL) {
        const char *end = strchr(at + 1, '$');
        size_t k = (size_t)(end - at - 1);
        add(b, t, (size_t)(at - t));
        if (k == 3 && memcmp(at + 1, "SFX", 3) == 0)
            snprintf(v, sizeof v, "%05x", i & 0xfffff);
        else if (k == 2 && memcmp(at + 1, "NS", 2) == 0)
            snprintf(v, sizeof v, "%u", i % 50);
        else if (k == 3 && memcmp(at + 1, "UID", 3) == 0)
            snprintf(v, sizeof v, "%08x-%04x-4%03x-9%03x-%012x", i * 2654435761u, i & 0xffff,
                     i % 4096, (i / 7) % 4096, i);
        else if (k == 2 && memcmp(at + 1, "RV", 2) == 0)
            snprintf(v, sizeof v, "%u", rv);
        else if (k == 4 && memcmp(at + 1, "NODE", 4) == 0)
            snprintf(v, sizeof v, "%u", i % 200);
        else if (k == 2 && memcmp(at + 1, "IP", 2) == 0)
            snprintf(v, sizeof v, "%u", 2 + i % 250);
        else
            v[0] = '\0';
        adds(b, v);
        t = end + 1;
    }
    adds(b, t);
}

typedef struct counts {
    size_t items, bytes;
    int make_objects;
} counts;

static kinf_err on_item(void *ud, const kinf_scan_item *it)
{
    counts *c = ud;
    c->items++;
    c->bytes += it->json_len;
    if (c->make_objects) {
        kinf_err e;
        kinf_object *o = kinf_object_new(it->json, it->json_len, &it->meta, &e);
        if (o == NULL)
            return e;
        kinf_object_unref(o);
    }
    return KINF_OK;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int reps = 3;

static void run(const char *label, kinf_scan_mode mode, unsigned flags, int make_objects,
                const buf *in, size_t chunk, size_t want_items)
{
    double best = 1e30;
    counts c = {0, 0, 0};
    char *stage = malloc(chunk);
    for (int rep = 0; rep < reps; rep++) {
        kinf_scan_options o = {on_item, NULL, &c, flags, 0};
        kinf_err e;
        kinf_scanner *s = kinf_scanner_new(mode, &o, &e);
        double t0, t;
        memset(&c, 0, sizeof c);
        c.make_objects = make_objects;
        t0 = now();
        for (size_t pos = 0; pos < in->len && e == KINF_OK; pos += chunk) {
            size_t n = in->len - pos < chunk ? in->len - pos : chunk;
            memcpy(stage, in->p + pos, n);
            e = kinf_scanner_feed(s, stage, n);
        }
        if (e == KINF_OK)
            e = kinf_scanner_finish(s);
        t = now() - t0;
        if (e != KINF_OK || c.items != want_items) {
            fprintf(stderr, "%s: %s (%zu items): %s\n", label, kinf_strerror(e), c.items,
                    kinf_scanner_error(s));
            exit(1);
        }
        kinf_scanner_free(s);
        if (t < best)
            best = t;
    }
    printf("%-34s %8.1f MB in %6.3f s  %7.0f MB/s  %9.0f items/s  (out %.0f B/item)\n", label,
           (double)in->len / 1e6, best, (double)in->len / 1e6 / best, (double)want_items / best,
           (double)c.bytes / (double)c.items);
    free(stage);
}

#if defined(__SSE2__)
#include <emmintrin.h>

/* Stage 1 of a two-stage scanner (see the header comment) over one chunk: returns the number
 * of structural positions written to idx (room for len + 3: at most one per byte, written four
 * at a time); *in_string carries the string state from chunk to chunk; *special accumulates
 * the OR of the backslash and control-or-non-ASCII bitmaps, which a real stage 1 also needs.
 * A tail under 64 bytes is left out and escapes are not resolved: both make this a lower
 * bound. */
static size_t stage1(const unsigned char *p, size_t len, uint32_t *idx, uint64_t *in_string_io,
                     uint64_t *special)
{
    const __m128i vq = _mm_set1_epi8('"'), vb = _mm_set1_epi8('\\'), vc = _mm_set1_epi8(0x20),
                  v1 = _mm_set1_epi8('{'), v2 = _mm_set1_epi8('}'), v3 = _mm_set1_epi8('['),
                  v4 = _mm_set1_epi8(']'), v5 = _mm_set1_epi8(':'), v6 = _mm_set1_epi8(',');
    uint64_t in_string = *in_string_io, any_special = 0;
    size_t k = 0;
    for (size_t i = 0; i + 64 <= len; i += 64) {
        uint64_t q = 0, st = 0, m;
        size_t n;
        for (int j = 0; j < 4; j++) {
            __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(p + i + 16 * (size_t)j));
            __m128i sv = _mm_or_si128(
                _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, v1), _mm_cmpeq_epi8(x, v2)),
                             _mm_or_si128(_mm_cmpeq_epi8(x, v3), _mm_cmpeq_epi8(x, v4))),
                _mm_or_si128(_mm_cmpeq_epi8(x, v5), _mm_cmpeq_epi8(x, v6)));
            __m128i sp = _mm_or_si128(_mm_cmpeq_epi8(x, vb), _mm_cmplt_epi8(x, vc));
            q |= (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(x, vq)) << (16 * j);
            st |= (uint64_t)(unsigned)_mm_movemask_epi8(sv) << (16 * j);
            any_special |= (uint64_t)(unsigned)_mm_movemask_epi8(sp) << (16 * j);
        }
        m = q; /* prefix XOR: bit set inside a string (from its opening quote) */
        m ^= m << 1;
        m ^= m << 2;
        m ^= m << 4;
        m ^= m << 8;
        m ^= m << 16;
        m ^= m << 32;
        m ^= in_string;
        in_string = (uint64_t)0 - (m >> 63);
        m = (st & ~m) | (q & m); /* structurals outside strings, and opening quotes */
        n = (size_t)__builtin_popcountll(m);
        for (size_t w = 0; w < n; w += 4) {
            for (int u = 0; u < 4; u++) { /* four at a time, as simdjson, past the end too */
                idx[k + w + (size_t)u] = (uint32_t)(i + (size_t)__builtin_ctzll(m | (1ull << 63)));
                m &= m - 1;
            }
        }
        k += n;
    }
    *in_string_io = in_string;
    *special |= any_special;
    return k;
}

/* Stage 1 over the list in chunks of 16 KiB, as the scanner gets them, the index of each chunk
 * written to one reused buffer (where a second pass would read it while it is still cached). */
static void run_stage1(const buf *in)
{
    enum { CHUNK = 16384 };
    static uint32_t idx[CHUNK + 4];
    double best = 1e30;
    size_t k = 0;
    uint64_t special = 0;
    for (int rep = 0; rep < reps; rep++) {
        double t0 = now(), t;
        uint64_t in_string = 0;
        k = 0;
        for (size_t pos = 0; pos < in->len; pos += CHUNK) {
            size_t n = in->len - pos < CHUNK ? in->len - pos : CHUNK;
            k += stage1((const unsigned char *)in->p + pos, n, idx, &in_string, &special);
        }
        t = now() - t0;
        if (t < best)
            best = t;
    }
    printf("%-34s %8.1f MB in %6.3f s  %7.0f MB/s  (%zu structurals, %.1f B each%s)\n",
           "list: stage 1 only (SSE2)", (double)in->len / 1e6, best, (double)in->len / 1e6 / best,
           k, (double)in->len / (double)(k ? k : 1), special ? "" : ", no special byte");
}
#endif

int main(int argc, char **argv)
{
    size_t pods = argc > 1 ? strtoul(argv[1], NULL, 10) : 100000;
    size_t events = argc > 2 ? strtoul(argv[2], NULL, 10) : 200000;
    size_t chunk = argc > 3 ? strtoul(argv[3], NULL, 10) : 16384;
    if (argc > 4)
        reps = atoi(argv[4]) > 0 ? atoi(argv[4]) : 1;
    buf list = {0}, watch = {0};

    adds(&list, "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":"
                "\"2000000\",\"continue\":\"\"},\"items\":[");
    for (size_t i = 0; i < pods; i++) {
        if (i)
            add(&list, ",", 1);
        add_pod(&list, (unsigned)i, 1000000u + (unsigned)i, 1);
    }
    adds(&list, "]}\n");
    for (size_t i = 0; i < events; i++) {
        adds(&watch, "{\"type\":\"MODIFIED\",\"object\":");
        add_pod(&watch, (unsigned)(i % (pods ? pods : 1)), 2000000u + (unsigned)i, 0);
        adds(&watch, "}\n");
    }
    printf("jsonscan bench: %zu pods (%.0f B/pod in the list), %zu watch events, %zu B chunks\n",
           pods, pods ? (double)list.len / (double)pods : 0.0, events, chunk);
    run("list", KINF_SCAN_LIST, 0, 0, &list, chunk, pods);
    run("list strip", KINF_SCAN_LIST, KINF_SCAN_STRIP_MANAGED_FIELDS, 0, &list, chunk, pods);
    run("list strip+inject", KINF_SCAN_LIST,
        KINF_SCAN_STRIP_MANAGED_FIELDS | KINF_SCAN_INJECT_KIND, 0, &list, chunk, pods);
    run("list strip+inject+object_new", KINF_SCAN_LIST,
        KINF_SCAN_STRIP_MANAGED_FIELDS | KINF_SCAN_INJECT_KIND, 1, &list, chunk, pods);
#if defined(__SSE2__)
    run_stage1(&list);
#endif
    run("watch MODIFIED", KINF_SCAN_WATCH, 0, 0, &watch, chunk, events);
    run("watch MODIFIED strip", KINF_SCAN_WATCH, KINF_SCAN_STRIP_MANAGED_FIELDS, 0, &watch, chunk,
        events);
    run("watch MODIFIED strip+object_new", KINF_SCAN_WATCH, KINF_SCAN_STRIP_MANAGED_FIELDS, 1,
        &watch, chunk, events);
    free(list.p);
    free(watch.p);
    return 0;
}
