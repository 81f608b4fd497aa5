/*
 * hvbench: LD_PRELOAD shim for User-mode Linux on hosts with a large XSAVE area.
 *
 * Why: the host kernel accepts a PTRACE_SETREGSET NT_X86_XSTATE write only of its full XSAVE
 * size (11008 bytes with AMX), while UML 6.1 writes the shorter buffer it knows. The write
 * fails with EFAULT ("ptrace set fp regs failed, errno = 14") and UML panics.
 *
 * What: such a short write is turned into a full one: read the tracee's full xstate, lay UML's
 * shorter buffer over its start (legacy area, header, AVX: everything UML saved), and write the
 * full size back. State beyond UML's buffer (AVX-512, AMX tiles) keeps the tracee's current
 * contents, as UML never saved it anyway. Every other ptrace request passes through unchanged.
 *
 * Built by hvbench with the system compiler: gcc -shared -fPIC -O2 -o SHIM.so uml_xstate.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/types.h>
#include <sys/uio.h>

#define PROBE_SIZE (64 * 1024) /* larger than any XSAVE area; the kernel says the real size */

typedef long (*ptrace_fn)(enum __ptrace_request, ...);

static ptrace_fn real_ptrace(void)
{
    static ptrace_fn real;
    if (!real)
        real = (ptrace_fn)dlsym(RTLD_NEXT, "ptrace");
    return real;
}

/* One full-size buffer per thread: UML's tracing thread calls this on every context switch. */
static __thread unsigned char *full;
static __thread size_t full_size;

static long write_full_xstate(pid_t pid, const struct iovec *short_iov)
{
    struct iovec iov;
    if (!full) {
        if (posix_memalign((void **)&full, 64, PROBE_SIZE) != 0) {
            full = NULL;
            errno = ENOMEM;
            return -1;
        }
    }
    iov.iov_base = full;
    iov.iov_len = PROBE_SIZE;
    if (real_ptrace()(PTRACE_GETREGSET, pid, (void *)NT_X86_XSTATE, &iov) < 0)
        return -1;
    full_size = iov.iov_len;
    if (short_iov->iov_len >= full_size)
        return real_ptrace()(PTRACE_SETREGSET, pid, (void *)NT_X86_XSTATE, short_iov);
    memcpy(full, short_iov->iov_base, short_iov->iov_len);
    iov.iov_base = full;
    iov.iov_len = full_size;
    return real_ptrace()(PTRACE_SETREGSET, pid, (void *)NT_X86_XSTATE, &iov);
}

long ptrace(enum __ptrace_request request, ...)
{
    va_list ap;
    va_start(ap, request);
    pid_t pid = va_arg(ap, pid_t);
    void *addr = va_arg(ap, void *);
    void *data = va_arg(ap, void *);
    va_end(ap);

    if (request == PTRACE_SETREGSET && (long)addr == NT_X86_XSTATE && data) {
        const struct iovec *iov = data;
        if (full_size == 0 || iov->iov_len < full_size)
            return write_full_xstate(pid, iov);
    }
    return real_ptrace()(request, pid, addr, data);
}
