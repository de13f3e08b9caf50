/* delayline: a userspace L3 switch between N TUN devices that emulates per-node links with a
 * bandwidth limit and a one-way propagation delay (this kernel has no netem qdisc).
 *
 *   cc -O2 -o delayline bench/delayline.c
 *   delayline [--delay-us 500] [--rate-mbit 1000] [--prefix gkd] [--count 4]
 *             [--base 10.77.0.1] [--queue-kb 4096]
 *
 * Creates TUN devices <prefix>0..<prefix>N-1 (MTU 1500), prints "ready" once they exist and
 * forwards until SIGTERM/SIGINT. IPv4 packets to base+k go to device k; everything else is dropped.
 * Each node k has an uplink and a downlink of `rate`, each serialising its packets; a packet from
 * s to d leaves s's uplink at t_up = max(now, up_free[s]) + wire/rate, arrives at t_up + delay and
 * is written to d when d's downlink has carried it: t_down = max(t_up + delay, down_free[d]) +
 * wire/rate. t_down is monotone per destination, so one FIFO per destination suffices. (A GSO
 * super-packet of S frames is forwarded frame by frame: its last frame arrives at t_up + delay +
 * wire/(S rate), so t_down = max(that, down_free[d] + wire/rate), not a second full wire time.)
 *
 * IFF_VNET_HDR + TUNSETOFFLOAD(CSUM, TSO4, TSO6) let the kernel hand us TCP super-packets of up
 * to 64 KB (GSO) instead of 1500-byte frames; the virtio_net_hdr is passed on unchanged so the
 * receiving kernel accepts the super-packet as is. The wire time counts every segment it stands
 * for, with its TCP/IP headers and 38 bytes of Ethernet framing (header, FCS, preamble, gap).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <linux/virtio_net.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#define MAXDEV 64
#define VNET ((int)sizeof(struct virtio_net_hdr))
#define BUFSZ (VNET + 65536)
#define ETH_OVERHEAD 38

struct pkt {
    struct pkt *next;
    int64_t due_ns; /* when to write it to the destination device */
    int len;        /* bytes in data, vnet header included */
    unsigned char data[];
};

struct fifo { struct pkt *head, *tail; long bytes; };

static volatile sig_atomic_t stop;
static void on_signal(int sig) { (void)sig; stop = 1; }

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int open_tun(const char *name) {
    int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    struct ifreq ifr = {0};
    int hdr = VNET;
    ifr.ifr_flags = IFF_TUN | IFF_NO_PI | IFF_VNET_HDR;
    snprintf(ifr.ifr_name, IFNAMSIZ, "%s", name);
    if (fd < 0 || ioctl(fd, TUNSETIFF, &ifr) < 0 || ioctl(fd, TUNSETVNETHDRSZ, &hdr) < 0 ||
        ioctl(fd, TUNSETOFFLOAD, TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6) < 0) {
        fprintf(stderr, "delayline: TUN %s: %s\n", name, strerror(errno));
        exit(1);
    }
    return fd;
}

/* Bytes on the wire for an IPv4 packet of len bytes; a GSO super-packet stands for *segs frames. */
static long wire_bytes(const struct virtio_net_hdr *vh, const unsigned char *ip, int len, int *nsegs) {
    int segs = 1, hdrs = (ip[0] & 15) * 4;
    if (vh->gso_type != VIRTIO_NET_HDR_GSO_NONE && vh->gso_size && ip[9] == IPPROTO_TCP && len > hdrs + 20) {
        hdrs += (ip[hdrs + 12] >> 4) * 4;
        segs = (len - hdrs + vh->gso_size - 1) / vh->gso_size;
        if (segs < 1) segs = 1;
    }
    *nsegs = segs;
    return len + (long)(segs - 1) * hdrs + (long)segs * ETH_OVERHEAD;
}

int main(int argc, char **argv) {
    long delay_us = 500, rate_mbit = 1000, count = 4, queue_kb = 4096;
    const char *prefix = "gkd", *base_s = "10.77.0.1";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--delay-us")) delay_us = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--rate-mbit")) rate_mbit = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--count")) count = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--queue-kb")) queue_kb = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--prefix")) prefix = argv[i + 1];
        else if (!strcmp(argv[i], "--base")) base_s = argv[i + 1];
        else { fprintf(stderr, "delayline: unknown option %s\n", argv[i]); return 2; }
    }
    struct in_addr base;
    if (count < 1 || count > MAXDEV || rate_mbit < 1 || delay_us < 0 || inet_pton(AF_INET, base_s, &base) != 1) {
        fprintf(stderr, "delayline: bad arguments\n");
        return 2;
    }
    uint32_t first = ntohl(base.s_addr);
    double ns_per_byte = 8000.0 / rate_mbit; /* 8 bits / (rate_mbit * 1e6 bit/s), in ns */
    int64_t delay_ns = delay_us * 1000;

    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    prctl(PR_SET_TIMERSLACK, 1UL); /* ppoll wakes within microseconds, not the default 50 us */
    prctl(PR_SET_PDEATHSIG, SIGTERM); /* never outlive the benchmark that started us */

    int fd[MAXDEV];
    struct pollfd pfd[MAXDEV];
    struct fifo q[MAXDEV] = {0};
    int64_t up_free[MAXDEV] = {0}, down_free[MAXDEV] = {0};
    long dropped = 0, forwarded = 0;
    for (int k = 0; k < count; k++) {
        char name[IFNAMSIZ];
        snprintf(name, sizeof name, "%s%d", prefix, k);
        fd[k] = open_tun(name);
        pfd[k] = (struct pollfd){.fd = fd[k], .events = POLLIN};
    }
    printf("ready\n");
    fflush(stdout);

    static unsigned char buf[BUFSZ];
    while (!stop) {
        /* deliver everything that is due, then sleep until the next due packet or new input */
        int64_t now = now_ns(), next = -1;
        for (int d = 0; d < count; d++) {
            struct pkt *p;
            while ((p = q[d].head) && p->due_ns <= now) {
                if (write(fd[d], p->data, p->len) < 0 && errno != EIO) /* EIO: device still down */
                    dropped++;
                q[d].head = p->next;
                q[d].bytes -= p->len;
                free(p);
            }
            if (!q[d].head) q[d].tail = NULL;
            else if (next < 0 || q[d].head->due_ns < next) next = q[d].head->due_ns;
        }
        struct timespec ts, *tmo = NULL;
        if (next >= 0) {
            int64_t wait = next - now;
            ts = (struct timespec){.tv_sec = wait / 1000000000, .tv_nsec = wait % 1000000000};
            tmo = &ts;
        }
        if (ppoll(pfd, count, tmo, NULL) <= 0) continue; /* timeout (deliver) or signal */

        /* read promptly: drain every readable device so the kernel's TUN queue adds no delay */
        for (int s = 0; s < count; s++) {
            if (pfd[s].revents & (POLLERR | POLLHUP | POLLNVAL)) { /* device gone (netns deleted) */
                fprintf(stderr, "delayline: device %d vanished\n", s);
                stop = 1;
            }
            if (!(pfd[s].revents & POLLIN)) continue;
            for (int burst = 0; burst < 64; burst++) {
                int n = read(fd[s], buf, BUFSZ);
                if (n < 0) break; /* EAGAIN: drained */
                const unsigned char *ip = buf + VNET;
                int len = n - VNET;
                if (len < 20 || (ip[0] >> 4) != 4) continue; /* IPv4 only */
                uint32_t dst = ((uint32_t)ip[16] << 24) | (ip[17] << 16) | (ip[18] << 8) | ip[19];
                if (dst < first || dst - first >= (uint32_t)count) continue;
                int d = dst - first;
                if (q[d].bytes + n > queue_kb * 1024) { dropped++; continue; } /* full: tail drop */
                int64_t t = now_ns();
                int segs;
                int64_t wire = (int64_t)(wire_bytes((struct virtio_net_hdr *)buf, ip, len, &segs) * ns_per_byte);
                int64_t t_up = (t > up_free[s] ? t : up_free[s]) + wire;
                up_free[s] = t_up;
                /* the downlink forwards frame by frame: the last frame, done on the uplink at t_up,
                 * leaves it one frame time after arriving, or after all frames queued before it */
                int64_t t_arr = t_up + delay_ns + wire / segs;
                int64_t t_down = t_arr > down_free[d] + wire ? t_arr : down_free[d] + wire;
                down_free[d] = t_down;
                struct pkt *p = malloc(sizeof *p + n);
                if (!p) { dropped++; continue; }
                p->next = NULL;
                p->due_ns = t_down;
                p->len = n;
                memcpy(p->data, buf, n);
                if (q[d].tail) q[d].tail->next = p; else q[d].head = p;
                q[d].tail = p;
                q[d].bytes += n;
                forwarded++;
            }
        }
    }
    fprintf(stderr, "delayline: %ld packets forwarded, %ld dropped\n", forwarded, dropped);
    for (int k = 0; k < count; k++) close(fd[k]); /* the devices vanish with their fds */
    return 0;
}
