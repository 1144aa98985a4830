/* test_shm_fd.c - a segment in a memory object (shm.c: kinf_shm_create_fd, kinf_shm_attach_fd):
 * a second mapping attached from the descriptor is the same memory, the same identity and the
 * same flags; a descriptor that holds no segment, or one already sized, is refused. */
#define _GNU_SOURCE
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ctest.h"
#include "shm.h"

static void attached_from_the_descriptor_is_the_same_segment(void)
{
    kinf_err err;
    int fd = memfd_create("kinformer:test", 0);
    kinf_shm *a, *b;
    kinf_shm_off off;

    CHECK(fd >= 0);
    a = kinf_shm_create_fd(fd, 100000, &err);
    CHECK(a != NULL && err == KINF_OK);
    if (a == NULL)
        return;
    CHECK(kinf_shm_size(a) % 4096 == 0 && kinf_shm_size(a) >= 100000);
    CHECK(kinf_shm_flags(a) == 0);
    CHECK(kinf_shm_claim_writer(a, getpid()) == KINF_OK);
    off = kinf_shm_alloc(a, 64);
    CHECK(off != 0);
    memcpy(kinf_shm_ptr(a, off), "kept", 5);
    kinf_shm_set_flags(a, 1);

    b = kinf_shm_attach_fd(fd, &err);
    CHECK(b != NULL && err == KINF_OK);
    if (b != NULL) {
        CHECK(kinf_shm_ptr(b, off) != kinf_shm_ptr(a, off)); /* another mapping */
        CHECK_STR((const char *)kinf_shm_ptr(b, off), "kept");
        CHECK(kinf_shm_seed(b) == kinf_shm_seed(a));
        CHECK(kinf_shm_size(b) == kinf_shm_size(a));
        kinf_shm_set_flags(b, 4);
        CHECK(kinf_shm_flags(a) == 5);
        /* the writer role is the segment's: another handle of this process is this process */
        CHECK(kinf_shm_claim_writer(b, getpid()) == KINF_OK);
    }
    /* a sized descriptor is not a new segment's */
    CHECK(kinf_shm_create_fd(fd, 100000, &err) == NULL && err == KINF_EINVAL);
    kinf_shm_close(b);
    kinf_shm_close(a);
    close(fd);
}

static void a_descriptor_without_a_segment_is_refused(void)
{
    kinf_err err;
    int fd = memfd_create("kinformer:other", 0);
    CHECK(fd >= 0);
    CHECK(kinf_shm_attach_fd(fd, &err) == NULL && err == KINF_EINVAL); /* empty */
    CHECK(ftruncate(fd, 1 << 20) == 0);
    CHECK(kinf_shm_attach_fd(fd, &err) == NULL && err == KINF_EINVAL); /* zeros: no magic */
    CHECK(kinf_shm_attach_fd(-1, &err) == NULL && err == KINF_EINVAL);
    close(fd);
    fd = memfd_create("kinformer:small", 0);
    CHECK(kinf_shm_create_fd(fd, 4096, &err) == NULL && err == KINF_EINVAL);
    close(fd);
}

TEST_MAIN(TEST(attached_from_the_descriptor_is_the_same_segment),
          TEST(a_descriptor_without_a_segment_is_refused))
