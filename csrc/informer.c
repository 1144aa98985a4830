/*
 * informer.c - applying popped deltas to the store and collecting notifications; the eventfd
 * wake-up. Contract in informer.h.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "informer.h"

void kinf_notifications_clear(kinf_notifications *ns)
{
    for (size_t i = 0; i < ns->n; i++) {
        kinf_object_unref(ns->v[i].obj);
        kinf_object_unref(ns->v[i].old);
    }
    ns->n = 0;
}

void kinf_notifications_free(kinf_notifications *ns)
{
    kinf_notifications_clear(ns);
    free(ns->v);
    ns->v = NULL;
    ns->cap = 0;
}

static kinf_err reserve(kinf_notifications *ns)
{
    kinf_notification *v;
    size_t cap;
    if (ns->n < ns->cap)
        return KINF_OK;
    cap = ns->cap ? ns->cap * 2 : 16;
    v = realloc(ns->v, cap * sizeof(*v));
    if (v == NULL)
        return KINF_ENOMEM;
    ns->v = v;
    ns->cap = cap;
    return KINF_OK;
}

typedef struct step_ctx {
    const kinf_informer_step *step;
    kinf_notifications *out;
    char *errbuf;
    size_t errlen;
    kinf_err err; /* the first problem worth reporting */
} step_ctx;

static void note_error(step_ctx *c, kinf_err err, const char *msg)
{
    if (c->err != KINF_OK && c->err != KINF_EINDEX)
        return; /* keep the first non-index problem */
    c->err = err;
    kinf_errmsg(c->errbuf, c->errlen, "%s", msg);
}

/* The object to store for a plain object: transformed, as a new reference (NULL: skip it). */
static kinf_object *transformed(step_ctx *c, kinf_object *obj, kinf_err *err)
{
    const kinf_informer_step *st = c->step;
    kinf_object *out = NULL;
    char msg[256] = "";

    *err = KINF_OK;
    if (st->transform == NULL || kinf_object_is_tombstone(obj))
        return kinf_object_ref(obj);
    *err = st->transform(st->transform_ud, obj, &out, msg, sizeof(msg));
    if (*err == KINF_OK && out != NULL) {
        if (kinf_object_is_tombstone(out) || out->key_len != obj->key_len ||
            memcmp(out->key, obj->key, obj->key_len) != 0) {
            kinf_errmsg(msg, sizeof(msg), "the result must be an object with the same key");
            *err = KINF_EINVAL;
        } else {
            return out;
        }
    }
    if (*err == KINF_OK)
        *err = KINF_EINVAL;
    kinf_object_unref(out);
    if (*err != KINF_ENOMEM) {
        char full[400];
        kinf_errmsg(full, sizeof(full), "transform failed for %s: %s", obj->key,
                    msg[0] ? msg : kinf_strerror(*err));
        note_error(c, KINF_EINVAL, full);
    }
    return NULL;
}

static int process(void *ud, const kinf_deltas *d, int is_initial)
{
    step_ctx *c = ud;
    kinf_store *store = c->step->store;
    kinf_notifications *out = c->out;
    char msg[320];
    kinf_err err;

    for (size_t i = 0; i < d->n; i++) {
        kinf_object *obj, *old = NULL;
        kinf_notification *n;

        if (reserve(out) != KINF_OK)
            goto nomem;
        obj = transformed(c, d->v[i].obj, &err);
        if (obj == NULL) {
            if (err == KINF_ENOMEM)
                goto nomem;
            continue; /* reported */
        }
        if (d->v[i].type == KINF_DELTA_DELETED) {
            err = kinf_store_delete(store, obj->key, obj->key_len, &old);
            if (err != KINF_OK) {
                kinf_object_unref(obj);
                if (err == KINF_ENOMEM)
                    goto nomem;
                note_error(c, err, kinf_strerror(err));
                continue;
            }
            n = &out->v[out->n++];
            n->kind = KINF_EVENT_DELETE;
            n->is_initial = 0;
            n->obj = obj;
            n->old = old;
            continue;
        }
        msg[0] = '\0';
        err = kinf_store_add(store, obj, &old, msg, sizeof(msg));
        if (err == KINF_EINDEX) {
            note_error(c, err, msg);
        } else if (err != KINF_OK) {
            kinf_object_unref(obj);
            if (err == KINF_ENOMEM)
                goto nomem;
            note_error(c, err, msg[0] ? msg : kinf_strerror(err));
            continue;
        }
        n = &out->v[out->n++];
        n->kind = old != NULL ? KINF_EVENT_UPDATE : KINF_EVENT_ADD;
        n->is_initial = old != NULL ? 0 : is_initial;
        n->obj = obj;
        n->old = old;
    }
    return KINF_OK;

nomem:
    c->err = KINF_ENOMEM;
    kinf_errmsg(c->errbuf, c->errlen, "out of memory while applying deltas (item requeued)");
    return KINF_FIFO_REQUEUE;
}

kinf_err kinf_informer_pop(const kinf_informer_step *step, double timeout, kinf_notifications *out,
                           char *errbuf, size_t errlen)
{
    step_ctx c = {step, out, errbuf, errlen, KINF_OK};
    kinf_deltas popped = {NULL, 0, 0};
    int initial = 0;
    kinf_err err;

    if (errlen > 0)
        errbuf[0] = '\0';
    err = kinf_fifo_pop(step->fifo, timeout, process, &c, &popped, &initial);
    kinf_deltas_clear(&popped);
    if (err != KINF_OK)
        return err;
    return c.err;
}

/* ---- wake-up ---- */

struct kinf_wakeup {
    int fd;
};

kinf_wakeup *kinf_wakeup_new(kinf_err *err)
{
    kinf_wakeup *w = malloc(sizeof(*w));
    if (w == NULL) {
        *err = KINF_ENOMEM;
        return NULL;
    }
    w->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (w->fd < 0) {
        *err = errno == ENOMEM ? KINF_ENOMEM : KINF_EIO;
        free(w);
        return NULL;
    }
    return w;
}

void kinf_wakeup_free(kinf_wakeup *w)
{
    if (w == NULL)
        return;
    close(w->fd);
    free(w);
}

int kinf_wakeup_fd(const kinf_wakeup *w)
{
    return w->fd;
}

void kinf_wakeup_signal(kinf_wakeup *w)
{
    uint64_t one = 1;
    /* EAGAIN only when the counter would overflow: it is readable then anyway. */
    while (write(w->fd, &one, sizeof(one)) < 0 && errno == EINTR)
        ;
}

unsigned long kinf_wakeup_clear(kinf_wakeup *w)
{
    uint64_t v = 0;
    ssize_t n;
    while ((n = read(w->fd, &v, sizeof(v))) < 0 && errno == EINTR)
        ;
    return n == (ssize_t)sizeof(v) ? (unsigned long)v : 0; /* EAGAIN: none */
}

void kinf_wakeup_notify(void *w)
{
    kinf_wakeup_signal(w);
}
