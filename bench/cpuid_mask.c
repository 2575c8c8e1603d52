/* Holds this process's view of the CPU to a narrower x86 instruction set, so a peer
 * library that picks its kernels by CPUID (ONNX Runtime's MLAS) runs the code it would
 * run on an AVX2 machine. Linux x86_64 with CPUID faulting (the `cpuid_fault` flag in
 * /proc/cpuinfo): after arch_prctl(ARCH_SET_CPUID, 0) every CPUID in the thread (and
 * in the threads it starts later) traps with SIGSEGV; the handler runs the real CPUID
 * with faulting lifted for that one instruction, clears the masked feature bits and
 * steps over the instruction. A SIGSEGV that is not a CPUID gets the default action.
 * The hold ends at execve, so processes the holder starts see the real CPU. */
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <cpuid.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#ifndef ARCH_SET_CPUID
#define ARCH_SET_CPUID 0x1012
#endif

/* Feature bits an AVX2 + FMA machine (Haswell to Comet Lake, Zen 2/3) lacks. */
#define BIT(n) (1u << (n))
/* leaf 7, subleaf 0 */
static const uint32_t L7_EBX = BIT(16) | BIT(17) | BIT(21) | BIT(26) | BIT(27) | BIT(28) |
                               BIT(30) | BIT(31); /* AVX-512 F DQ IFMA PF ER CD BW VL */
static const uint32_t L7_ECX = BIT(1) | BIT(6) | BIT(11) | BIT(12) |
                               BIT(14); /* VBMI VBMI2 VNNI BITALG VPOPCNTDQ */
static const uint32_t L7_EDX = BIT(2) | BIT(3) | BIT(8) | BIT(22) | BIT(23) | BIT(24) |
                               BIT(25); /* 4VNNIW 4FMAPS VP2INTERSECT AMX-BF16 FP16 TILE INT8 */
/* leaf 7, subleaf 1 */
static const uint32_t L71_EAX = BIT(4) | BIT(5) | BIT(21) | BIT(23); /* AVX-VNNI, BF16, AMX-FP16, AVX-IFMA */
static const uint32_t L71_EDX = BIT(4) | BIT(5) | BIT(10) | BIT(19); /* VNNI-INT8, NE-CONVERT, VNNI-INT16, AVX10 */

static volatile long traps;

static void on_segv(int sig, siginfo_t *info, void *context)
{
    ucontext_t *uc = context;
    greg_t *r = uc->uc_mcontext.gregs;
    const unsigned char *ip = (const unsigned char *)r[REG_RIP];
    (void)sig;
    if (info->si_code != SI_KERNEL || ip[0] != 0x0f || ip[1] != 0xa2) {
        signal(SIGSEGV, SIG_DFL); /* not ours: returning re-runs the fault, now fatal */
        return;
    }
    uint32_t leaf = (uint32_t)r[REG_RAX], sub = (uint32_t)r[REG_RCX];
    uint32_t a, b, c, d;
    syscall(SYS_arch_prctl, ARCH_SET_CPUID, 1);
    __cpuid_count(leaf, sub, a, b, c, d);
    syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0);
    if (leaf == 7 && sub == 0) {
        b &= ~L7_EBX;
        c &= ~L7_ECX;
        d &= ~L7_EDX;
    } else if (leaf == 7 && sub == 1) {
        a &= ~L71_EAX;
        d &= ~L71_EDX;
    } else if (leaf == 0x24) {
        a = b = c = d = 0; /* no AVX10 leaf */
    }
    r[REG_RAX] = a;
    r[REG_RBX] = b;
    r[REG_RCX] = c;
    r[REG_RDX] = d;
    r[REG_RIP] += 2;
    traps += 1;
}

/* 0 on success; -1 where the kernel or the CPU cannot fault CPUID. */
int pk_hold_to_avx2(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSEGV, &sa, NULL) != 0)
        return -1;
    return syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0) == 0 ? 0 : -1;
}

/* The CPUID instruction as this thread sees it (trapped and masked when held). */
void pk_cpuid(uint32_t leaf, uint32_t sub, uint32_t out[4])
{
    __cpuid_count(leaf, sub, out[0], out[1], out[2], out[3]);
}

long pk_cpuid_traps(void)
{
    return traps;
}
