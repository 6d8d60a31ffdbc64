/*
 * A stand-in libnvidia-ml.so.1 for tests: the NVML entry points nvidia-ml-py calls for per-process
 * data, answering from a node described in a text file named by FAKE_NVML_NODE. The file is read
 * again by every nvmlDeviceGetCount call, so a test changes the node between refreshes by rewriting it.
 *
 * File format, one record per line, '#' starts a comment:
 *   gpu <index> <uuid> [minor=<n>] [utilization=no]   a whole GPU (utilization=no: per-process SM
 *                                                      utilisation answers NOT_SUPPORTED)
 *   mig <gpu index> <gpu instance id> <mig uuid> [slices=<n>] [profile=<id>] [start=<n>]
 *                                                      a MIG device of that GPU (MIG mode on); its GPU
 *                                                      instance's placement spans <n> memory slices
 *                                                      (default 1) from slice <start> (default 0), and
 *                                                      its GPU instance profile ID is <id> (default 0):
 *                                                      nvmlDeviceGetGpuInstances lists it under that ID
 *   energy <gpu uuid> <millijoules> [<milliwatts>]     the board's total energy since the driver
 *                                                      loaded (nvmlDeviceGetTotalEnergyConsumption;
 *                                                      a GPU without the line answers NOT_SUPPORTED);
 *                                                      a test moves it by rewriting the file, or it
 *                                                      grows by itself at <milliwatts> from nvmlInit
 *   process <device uuid> <compute|graphics|mps> <pid> <used bytes>
 *   sample <device uuid> <pid> <sm percent> [<age ms>] a per-process utilisation sample, taken
 *                                                      <age ms> before the call (default 0)
 *   fail <function name> <nvml return code> [<uuid>]   that entry point answers that error (for
 *                                                      that device only, when a UUID is given)
 *   hang <function name> <ms>                          that entry point takes this long to answer;
 *                                                      as each such call begins, its name is added
 *                                                      as a line to the node file's name + ".hanging"
 * XID events (nvmlEventSetCreate, nvmlDeviceRegisterEvents, nvmlEventSetWait_v2, nvmlEventSetFree) come
 * from the node file's name + ".events", which a test appends to; each line is delivered once, in order,
 * to the first wait of a set that registered its GPU (lines for a GPU no set registered are dropped):
 *   xid <gpu uuid> <xid> [<gpu instance id> [<compute instance id>]]   (ids default to 0xFFFFFFFF: the
 *                                                      event is tied to no MIG instance)
 * Registering a MIG device's handle answers NOT_SUPPORTED, as the driver does; `fail
 * nvmlDeviceRegisterEvents <code> <uuid>` refuses one GPU (NOT_SUPPORTED 3, GPU_IS_LOST 15), `fail
 * nvmlEventSetWait 15` makes every wait answer GPU_IS_LOST, and `hang nvmlEventSetWait <ms>` a wait that hangs.
 * `fail nvmlDeviceGetHandleByIndex 15 <uuid>` (or nvmlDeviceGetUUID) is a GPU already lost when first asked.
 * A missing FAKE_NVML_NODE file makes nvmlInit answer NVML_ERROR_DRIVER_NOT_LOADED, as on a node
 * without the driver. Built at test time: cc -shared -fPIC -o libnvidia-ml.so.1 fake_nvml.c
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3, NVML_ERROR_NOT_FOUND = 6, NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9, NVML_ERROR_TIMEOUT = 10, NVML_ERROR_GPU_IS_LOST = 15, NVML_ERROR_UNKNOWN = 999,
};

/* The layouts nvidia-ml-py declares: c_nvmlProcessInfo_v2_t (= _v3_t) and c_nvmlProcessUtilizationSample_t. */
typedef struct { unsigned int pid; unsigned long long usedGpuMemory; unsigned int gpuInstanceId; unsigned int computeInstanceId; } nvmlProcessInfo_t;
typedef struct { unsigned int pid; unsigned long long timeStamp; unsigned int smUtil, memUtil, encUtil, decUtil; } nvmlProcessUtilizationSample_t;

#define MAX_DEVICES 64
#define MAX_PROCESSES 1024
#define MAX_FAILURES 32
#define NO_INSTANCE 0xFFFFFFFFu

enum kind { COMPUTE, GRAPHICS, MPS };

struct device {
    int is_mig;
    unsigned int index, minor, instance, parent;  /* parent: slot of a MIG device's GPU */
    int utilization;
    char uuid[96];
    int has_energy;                 /* an energy line names this GPU */
    unsigned long long energy_mj;   /* its total energy consumption */
    unsigned long long milliwatts;  /* the power it draws: energy grows by this from the first nvmlInit */
    unsigned int memory_slices;     /* a MIG device's GPU instance placement size */
    unsigned int placement_start;   /* and the memory slice it starts at */
    unsigned int profile_id;        /* its GPU instance profile ID (nvidia-smi mig -lgip's ID) */
};
struct process { int device; enum kind kind; unsigned int pid; unsigned long long used; };
struct sample { int device; unsigned int pid, sm; unsigned long long age_ms; };
struct failure { char function[64]; int code; char uuid[96]; };
struct hang { char function[64]; long ms; };

static struct device devices[MAX_DEVICES];
static int device_count, gpu_count;
static struct process processes[MAX_PROCESSES];
static int process_count;
static struct sample samples[MAX_PROCESSES];
static int sample_count;
static struct failure failures[MAX_FAILURES];
static int failure_count;
static struct hang hangs[MAX_FAILURES];
static int hang_count;
static int initialised;

static int find_device(const char *uuid) {
    for (int i = 0; i < device_count; i++)
        if (strcmp(devices[i].uuid, uuid) == 0) return i;
    return -1;
}

static int find_gpu(unsigned int index) {
    for (int i = 0; i < device_count; i++)
        if (!devices[i].is_mig && devices[i].index == index) return i;
    return -1;
}

static void parse_gpu(char *rest) {
    struct device *d = &devices[device_count];
    char options[2][64] = {"", ""};
    memset(d, 0, sizeof *d);
    if (sscanf(rest, "%u %95s %63s %63s", &d->index, d->uuid, options[0], options[1]) < 2) return;
    d->minor = d->index;
    d->instance = NO_INSTANCE;
    d->utilization = 1;
    for (int i = 0; i < 2; i++) {
        if (strncmp(options[i], "minor=", 6) == 0) d->minor = (unsigned int)atoi(options[i] + 6);
        if (strcmp(options[i], "utilization=no") == 0) d->utilization = 0;
    }
    device_count++;
    gpu_count++;
}

static void parse_mig(char *rest) {
    struct device *d = &devices[device_count];
    unsigned int gpu;
    char options[3][64] = {"", "", ""};
    memset(d, 0, sizeof *d);
    if (sscanf(rest, "%u %u %95s %63s %63s %63s", &gpu, &d->instance, d->uuid, options[0], options[1],
               options[2]) < 3 || find_gpu(gpu) < 0) return;
    d->memory_slices = 1;
    for (int i = 0; i < 3; i++) {
        if (strncmp(options[i], "slices=", 7) == 0) d->memory_slices = (unsigned int)atoi(options[i] + 7);
        if (strncmp(options[i], "profile=", 8) == 0) d->profile_id = (unsigned int)atoi(options[i] + 8);
        if (strncmp(options[i], "start=", 6) == 0) d->placement_start = (unsigned int)atoi(options[i] + 6);
    }
    d->is_mig = 1;
    d->parent = (unsigned int)find_gpu(gpu);
    d->index = gpu;
    device_count++;
}

static void parse_process(char *rest) {
    struct process *p = &processes[process_count];
    char uuid[96], kind[16];
    if (sscanf(rest, "%95s %15s %u %llu", uuid, kind, &p->pid, &p->used) != 4) return;
    if ((p->device = find_device(uuid)) < 0) return;
    p->kind = strcmp(kind, "graphics") == 0 ? GRAPHICS : strcmp(kind, "mps") == 0 ? MPS : COMPUTE;
    process_count++;
}

static void parse_sample(char *rest) {
    struct sample *s = &samples[sample_count];
    char uuid[96];
    s->age_ms = 0;
    if (sscanf(rest, "%95s %u %u %llu", uuid, &s->pid, &s->sm, &s->age_ms) < 3) return;
    if ((s->device = find_device(uuid)) < 0) return;
    sample_count++;
}

static void parse_energy(char *rest) {
    char uuid[96];
    unsigned long long millijoules, milliwatts = 0;
    if (sscanf(rest, "%95s %llu %llu", uuid, &millijoules, &milliwatts) < 2) return;
    int slot = find_device(uuid);
    if (slot < 0 || devices[slot].is_mig) return;
    devices[slot].has_energy = 1;
    devices[slot].energy_mj = millijoules;
    devices[slot].milliwatts = milliwatts;
}

static void parse_failure(char *rest) {
    struct failure *f = &failures[failure_count];
    f->uuid[0] = '\0';
    if (sscanf(rest, "%63s %d %95s", f->function, &f->code, f->uuid) >= 2) failure_count++;
}

static void parse_hang(char *rest) {
    struct hang *h = &hangs[hang_count];
    if (sscanf(rest, "%63s %ld", h->function, &h->ms) == 2) hang_count++;
}

/* Reads the node file; returns 0 when it cannot be read. */
static int load_node(void) {
    const char *path = getenv("FAKE_NVML_NODE");
    FILE *file = path ? fopen(path, "r") : NULL;
    char line[512], word[16];
    if (!file) return 0;
    device_count = gpu_count = process_count = sample_count = failure_count = hang_count = 0;
    while (fgets(line, sizeof line, file)) {
        int used = 0;
        if (sscanf(line, "%15s %n", word, &used) != 1 || word[0] == '#') continue;
        char *rest = line + used;
        if (strcmp(word, "gpu") == 0 && device_count < MAX_DEVICES) parse_gpu(rest);
        else if (strcmp(word, "mig") == 0 && device_count < MAX_DEVICES) parse_mig(rest);
        else if (strcmp(word, "process") == 0 && process_count < MAX_PROCESSES) parse_process(rest);
        else if (strcmp(word, "sample") == 0 && sample_count < MAX_PROCESSES) parse_sample(rest);
        else if (strcmp(word, "fail") == 0 && failure_count < MAX_FAILURES) parse_failure(rest);
        else if (strcmp(word, "hang") == 0 && hang_count < MAX_FAILURES) parse_hang(rest);
        else if (strcmp(word, "energy") == 0) parse_energy(rest);
    }
    fclose(file);
    return 1;
}

/* The error injected for this entry point (and device: NULL for calls not about one device). */
static int injected_for(const char *function, const struct device *d) {
    for (int i = 0; i < failure_count; i++) {
        if (strcmp(failures[i].function, function) != 0) continue;
        if (failures[i].uuid[0] == '\0' || (d && strcmp(failures[i].uuid, d->uuid) == 0)) return failures[i].code;
    }
    return NVML_SUCCESS;
}
/* Tells the test that a hang has begun, so that it waits on that rather than on the clock. */
static void note_hanging(const char *function) {
    const char *node = getenv("FAKE_NVML_NODE");
    char path[4096];
    if (!node || snprintf(path, sizeof path, "%s.hanging", node) >= (int)sizeof path) return;
    FILE *file = fopen(path, "a");
    if (!file) return;
    fprintf(file, "%s\n", function);
    fclose(file);
}

/* Every entry point's first step: the delay injected for it, then the error injected for it. */
static int injected(const char *function) {
    for (int i = 0; i < hang_count; i++) {
        if (strcmp(hangs[i].function, function) != 0) continue;
        note_hanging(function);
        struct timespec pause = {hangs[i].ms / 1000, (hangs[i].ms % 1000) * 1000000L};
        nanosleep(&pause, NULL);
    }
    return injected_for(function, NULL);
}

#define CHECK(function)                                         \
    do {                                                        \
        if (!initialised) return NVML_ERROR_UNINITIALIZED;      \
        int code_ = injected(function);                         \
        if (code_ != NVML_SUCCESS) return code_;                \
    } while (0)

/* Handles are pointers into devices[]; one outside it is an invalid argument. */
static struct device *device_of(void *handle) {
    struct device *d = handle;
    if (d < devices || d >= devices + device_count) return NULL;
    return d;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    if (!load_node()) return NVML_ERROR_DRIVER_NOT_LOADED;
    initialised = 1;
    return injected("nvmlInit");
}
nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlShutdown(void) { initialised = 0; return NVML_SUCCESS; }

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    load_node();  /* the test may have rewritten the node since the last refresh */
    CHECK("nvmlDeviceGetCount");
    *count = (unsigned int)gpu_count;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **device) {
    CHECK("nvmlDeviceGetHandleByIndex");
    int slot = find_gpu(index);
    if (slot < 0) return NVML_ERROR_INVALID_ARGUMENT;
    int code = injected_for("nvmlDeviceGetHandleByIndex", &devices[slot]);  /* a GPU lost before it is named */
    if (code != NVML_SUCCESS) return code;
    *device = &devices[slot];
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, void **device) { return nvmlDeviceGetHandleByIndex_v2(index, device); }

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, void **device) {
    CHECK("nvmlDeviceGetHandleByUUID");
    int slot = find_device(uuid);
    if (slot < 0) return NVML_ERROR_NOT_FOUND;
    *device = &devices[slot];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(void *handle, char *uuid, unsigned int length) {
    CHECK("nvmlDeviceGetUUID");
    struct device *d = device_of(handle);
    if (!d || !uuid) return NVML_ERROR_INVALID_ARGUMENT;
    int code = injected_for("nvmlDeviceGetUUID", d);
    if (code != NVML_SUCCESS) return code;
    if (strlen(d->uuid) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(uuid, d->uuid);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetIndex(void *handle, unsigned int *index) {
    CHECK("nvmlDeviceGetIndex");
    struct device *d = device_of(handle);
    if (!d || d->is_mig) return d ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_INVALID_ARGUMENT;
    *index = d->index;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMinorNumber(void *handle, unsigned int *minor) {
    CHECK("nvmlDeviceGetMinorNumber");
    struct device *d = device_of(handle);
    if (!d || d->is_mig) return d ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_INVALID_ARGUMENT;
    *minor = d->minor;
    return NVML_SUCCESS;
}

static unsigned int mig_count(const struct device *gpu) {
    unsigned int count = 0;
    for (int i = 0; i < device_count; i++)
        if (devices[i].is_mig && &devices[devices[i].parent] == gpu) count++;
    return count;
}

nvmlReturn_t nvmlDeviceGetMigMode(void *handle, unsigned int *current, unsigned int *pending) {
    CHECK("nvmlDeviceGetMigMode");
    struct device *d = device_of(handle);
    if (!d || d->is_mig) return d ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_INVALID_ARGUMENT;
    *current = *pending = mig_count(d) > 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(void *handle, unsigned int *count) {
    CHECK("nvmlDeviceGetMaxMigDeviceCount");
    struct device *d = device_of(handle);
    if (!d || d->is_mig) return d ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_INVALID_ARGUMENT;
    *count = 7;  /* what an A100/H100 answers: the most instances it can hold, not how many exist */
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(void *handle, unsigned int index, void **mig) {
    CHECK("nvmlDeviceGetMigDeviceHandleByIndex");
    struct device *d = device_of(handle);
    if (!d || d->is_mig) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int seen = 0;
    for (int i = 0; i < device_count; i++) {
        if (!devices[i].is_mig || &devices[devices[i].parent] != d) continue;
        if (seen++ == index) { *mig = &devices[i]; return NVML_SUCCESS; }
    }
    return NVML_ERROR_NOT_FOUND;  /* a free slot: real NVML answers NOT_FOUND too */
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(void *handle, unsigned int *is_mig) {
    CHECK("nvmlDeviceIsMigDeviceHandle");
    struct device *d = device_of(handle);
    if (!d) return NVML_ERROR_INVALID_ARGUMENT;
    *is_mig = (unsigned int)d->is_mig;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(void *handle, void **parent) {
    CHECK("nvmlDeviceGetDeviceHandleFromMigDeviceHandle");
    struct device *d = device_of(handle);
    if (!d || !d->is_mig) return NVML_ERROR_INVALID_ARGUMENT;
    *parent = &devices[d->parent];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(void *handle, unsigned int *instance) {
    CHECK("nvmlDeviceGetGpuInstanceId");
    struct device *d = device_of(handle);
    if (!d || !d->is_mig) return d ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_INVALID_ARGUMENT;
    *instance = d->instance;
    return NVML_SUCCESS;
}

/* NVML's two-call protocol: a NULL or short array gets the count and INSUFFICIENT_SIZE. */
static nvmlReturn_t running_processes(const char *function, enum kind kind, void *handle,
                                      unsigned int *count, nvmlProcessInfo_t *infos) {
    CHECK(function);
    struct device *d = device_of(handle);
    if (!d || !count) return NVML_ERROR_INVALID_ARGUMENT;
    int code = injected_for(function, d);
    if (code != NVML_SUCCESS) return code;
    unsigned int found = 0;
    for (int i = 0; i < process_count; i++)
        if (&devices[processes[i].device] == d && processes[i].kind == kind) found++;
    if (found == 0) { *count = 0; return NVML_SUCCESS; }
    if (!infos || *count < found) { *count = found; return NVML_ERROR_INSUFFICIENT_SIZE; }
    unsigned int n = 0;
    for (int i = 0; i < process_count; i++) {
        if (&devices[processes[i].device] != d || processes[i].kind != kind) continue;
        infos[n].pid = processes[i].pid;
        infos[n].usedGpuMemory = processes[i].used;
        infos[n].gpuInstanceId = d->is_mig ? d->instance : NO_INSTANCE;
        infos[n].computeInstanceId = d->is_mig ? 0 : NO_INSTANCE;
        n++;
    }
    *count = n;
    return NVML_SUCCESS;
}

#define PROCESS_LIST(name, kind)                                                          \
    nvmlReturn_t name##_v3(void *h, unsigned int *c, nvmlProcessInfo_t *p) { return running_processes(#name, kind, h, c, p); } \
    nvmlReturn_t name##_v2(void *h, unsigned int *c, nvmlProcessInfo_t *p) { return running_processes(#name, kind, h, c, p); }
PROCESS_LIST(nvmlDeviceGetComputeRunningProcesses, COMPUTE)
PROCESS_LIST(nvmlDeviceGetGraphicsRunningProcesses, GRAPHICS)
PROCESS_LIST(nvmlDeviceGetMPSComputeRunningProcesses, MPS)

static unsigned long long now_us(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (unsigned long long)tv.tv_sec * 1000000ULL + (unsigned long long)tv.tv_usec;
}

nvmlReturn_t nvmlDeviceGetProcessUtilization(void *handle, nvmlProcessUtilizationSample_t *out,
                                             unsigned int *count, unsigned long long last_seen) {
    CHECK("nvmlDeviceGetProcessUtilization");
    struct device *d = device_of(handle);
    if (!d || !count) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->is_mig || !d->utilization) return NVML_ERROR_NOT_SUPPORTED;  /* as the driver on MIG */
    unsigned long long now = now_us();
    unsigned int found = 0;
    for (int i = 0; i < sample_count; i++)
        if (&devices[samples[i].device] == d && now - samples[i].age_ms * 1000ULL > last_seen) found++;
    if (found == 0) return NVML_ERROR_NOT_FOUND;  /* no sample newer than last_seen */
    if (!out || *count < found) { *count = found; return NVML_ERROR_INSUFFICIENT_SIZE; }
    unsigned int n = 0;
    for (int i = 0; i < sample_count; i++) {
        unsigned long long stamp = now - samples[i].age_ms * 1000ULL;
        if (&devices[samples[i].device] != d || stamp <= last_seen) continue;
        memset(&out[n], 0, sizeof out[n]);
        out[n].pid = samples[i].pid;
        out[n].timeStamp = stamp;
        out[n].smUtil = samples[i].sm;
        n++;
    }
    *count = n;
    return NVML_SUCCESS;
}

static unsigned long long energy_since_us;  /* when a drawing board's energy started to grow */

/* Energy is the board's: NVML answers it for a whole GPU's handle, not for a MIG device's. */
nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(void *handle, unsigned long long *energy) {
    CHECK("nvmlDeviceGetTotalEnergyConsumption");
    struct device *d = device_of(handle);
    if (!d || !energy) return NVML_ERROR_INVALID_ARGUMENT;
    int code = injected_for("nvmlDeviceGetTotalEnergyConsumption", d);
    if (code != NVML_SUCCESS) return code;
    if (d->is_mig || !d->has_energy) return NVML_ERROR_NOT_SUPPORTED;
    if (energy_since_us == 0) energy_since_us = now_us();
    *energy = d->energy_mj + d->milliwatts * ((now_us() - energy_since_us) / 1000ULL) / 1000ULL;
    return NVML_SUCCESS;
}

/* The layouts nvidia-ml-py declares: c_nvmlGpuInstancePlacement_t and c_nvmlGpuInstanceInfo_t. A GPU
 * instance handle is the MIG device's slot, as the fake has one MIG device per GPU instance. */
typedef struct { unsigned int start, size; } nvmlGpuInstancePlacement_t;
typedef struct { void *device; unsigned int id, profileId; nvmlGpuInstancePlacement_t placement; } nvmlGpuInstanceInfo_t;

nvmlReturn_t nvmlDeviceGetGpuInstanceById(void *handle, unsigned int id, void **instance) {
    CHECK("nvmlDeviceGetGpuInstanceById");
    struct device *d = device_of(handle);
    if (!d || d->is_mig || !instance) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < device_count; i++) {
        if (devices[i].is_mig && &devices[devices[i].parent] == d && devices[i].instance == id) {
            *instance = &devices[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlGpuInstanceGetInfo(void *instance, nvmlGpuInstanceInfo_t *info) {
    CHECK("nvmlGpuInstanceGetInfo");
    struct device *d = device_of(instance);
    if (!d || !d->is_mig || !info) return NVML_ERROR_INVALID_ARGUMENT;
    info->device = &devices[d->parent];
    info->id = d->instance;
    info->profileId = d->profile_id;
    info->placement.start = d->placement_start;
    info->placement.size = d->memory_slices;
    return NVML_SUCCESS;
}

/* The GPU's instances of one profile; as NVML, it fills the caller's array without knowing its size. */
nvmlReturn_t nvmlDeviceGetGpuInstances(void *handle, unsigned int profile_id, void **instances, unsigned int *count) {
    CHECK("nvmlDeviceGetGpuInstances");
    struct device *d = device_of(handle);
    if (!d || d->is_mig || !instances || !count) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int n = 0;
    for (int i = 0; i < device_count; i++)
        if (devices[i].is_mig && &devices[devices[i].parent] == d && devices[i].profile_id == profile_id)
            instances[n++] = &devices[i];
    *count = n;
    return NVML_SUCCESS;
}

/* XID events. A set is the UUIDs of the GPUs registered on it; the event file's read position is the
 * process's, so an event is delivered once even when the exporter frees its set and makes another. */
#define MAX_SETS 16
typedef struct { void *device; unsigned long long eventType, eventData; unsigned int gpuInstanceId, computeInstanceId; } nvmlEventData_t;
struct event_set { int used; int count; char uuids[MAX_DEVICES][96]; };
static struct event_set sets[MAX_SETS];
static long events_read;  /* bytes of the events file delivered (or dropped) so far */
static char events_path[4096];  /* the file they were read from: another file (another test) starts at 0 */

nvmlReturn_t nvmlEventSetCreate(void **set) {
    CHECK("nvmlEventSetCreate");
    for (int i = 0; i < MAX_SETS; i++) {
        if (sets[i].used) continue;
        memset(&sets[i], 0, sizeof sets[i]);
        sets[i].used = 1;
        *set = &sets[i];
        return NVML_SUCCESS;
    }
    return NVML_ERROR_UNKNOWN;
}

static struct event_set *set_of(void *handle) {
    struct event_set *s = handle;
    return (s >= sets && s < sets + MAX_SETS && s->used) ? s : NULL;
}

nvmlReturn_t nvmlEventSetFree(void *set) {
    CHECK("nvmlEventSetFree");
    struct event_set *s = set_of(set);
    if (!s) return NVML_ERROR_INVALID_ARGUMENT;
    s->used = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(void *handle, unsigned long long types, void *set) {
    CHECK("nvmlDeviceRegisterEvents");
    struct device *d = device_of(handle);
    struct event_set *s = set_of(set);
    if (!d || !s || types == 0) return NVML_ERROR_INVALID_ARGUMENT;
    int code = injected_for("nvmlDeviceRegisterEvents", d);
    if (code != NVML_SUCCESS) return code;
    if (d->is_mig) return NVML_ERROR_NOT_SUPPORTED;  /* events are registered on the parent GPU */
    for (int i = 0; i < s->count; i++)
        if (strcmp(s->uuids[i], d->uuid) == 0) return NVML_SUCCESS;
    if (s->count < MAX_DEVICES) strcpy(s->uuids[s->count++], d->uuid);
    return NVML_SUCCESS;
}

static int registered(const struct event_set *s, const char *uuid) {
    for (int i = 0; i < s->count; i++)
        if (strcmp(s->uuids[i], uuid) == 0) return 1;
    return 0;
}

/* The next undelivered event for this set: 1 and *data filled, or 0 when the file holds none yet. */
static int next_event(const struct event_set *s, nvmlEventData_t *data) {
    const char *node = getenv("FAKE_NVML_NODE");
    char path[4096], line[512], uuid[96];
    if (!node || snprintf(path, sizeof path, "%s.events", node) >= (int)sizeof path) return 0;
    if (strcmp(path, events_path) != 0) {
        strcpy(events_path, path);
        events_read = 0;
    }
    FILE *file = fopen(path, "r");
    if (!file) return 0;
    int found = 0;
    if (fseek(file, events_read, SEEK_SET) == 0) {
        while (!found && fgets(line, sizeof line, file) && strchr(line, '\n')) {
            unsigned long long xid;
            unsigned int gi = NO_INSTANCE, ci = NO_INSTANCE;
            events_read = ftell(file);
            if (sscanf(line, "xid %95s %llu %u %u", uuid, &xid, &gi, &ci) < 2 || !registered(s, uuid)) continue;
            int slot = find_device(uuid);
            if (slot < 0) continue;
            data->device = &devices[slot];
            data->eventType = 0x8;  /* nvmlEventTypeXidCriticalError */
            data->eventData = xid;
            data->gpuInstanceId = gi;
            data->computeInstanceId = ci;
            found = 1;
        }
    }
    fclose(file);
    return found;
}

nvmlReturn_t nvmlEventSetWait_v2(void *set, nvmlEventData_t *data, unsigned int timeout_ms) {
    CHECK("nvmlEventSetWait");
    struct event_set *s = set_of(set);
    if (!s || !data) return NVML_ERROR_INVALID_ARGUMENT;
    /* Polls the events file every 10 ms until the timeout, as a blocking wait seen from outside. */
    for (unsigned int waited = 0;; waited += 10) {
        if (next_event(s, data)) return NVML_SUCCESS;
        if (waited >= timeout_ms) return NVML_ERROR_TIMEOUT;
        struct timespec pause = {0, 10 * 1000000L};
        nanosleep(&pause, NULL);
    }
}
nvmlReturn_t nvmlEventSetWait(void *set, nvmlEventData_t *data, unsigned int timeout_ms) {
    return nvmlEventSetWait_v2(set, data, timeout_ms);
}
