package topology

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

// The few NVML entry points the topology reads, resolved with dlsym from
// libnvidia-ml.so.1, so that libgonccl.so has no undefined nvml* symbol. Types
// and numbering follow nvml.h.
typedef int nvmlw_ret;
typedef void* nvmlw_dev;
typedef struct {
	char busIdLegacy[16];
	unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
	char busId[32];
} nvmlw_pci;

enum { NVMLW_SUCCESS = 0, NVMLW_INVALID_ARGUMENT = 2, NVMLW_NOT_SUPPORTED = 3,
       NVMLW_INSUFFICIENT_SIZE = 7, NVMLW_FUNCTION_NOT_FOUND = 13 };

// nvmlProcessInfo_t of nvmlDeviceGetMPSComputeRunningProcesses_v3 (and _v2).
typedef struct {
	unsigned int pid;
	unsigned long long usedGpuMemory;
	unsigned int gpuInstanceId, computeInstanceId;
} nvmlw_proc;

static void* nvmlw_handle;
static nvmlw_ret (*nvmlw_init)(void);
static nvmlw_ret (*nvmlw_shutdown)(void);
static const char* (*nvmlw_error_string)(nvmlw_ret);
static nvmlw_ret (*nvmlw_count)(unsigned int*);
static nvmlw_ret (*nvmlw_by_index)(unsigned int, nvmlw_dev*);
static nvmlw_ret (*nvmlw_name)(nvmlw_dev, char*, unsigned int);
static nvmlw_ret (*nvmlw_uuid)(nvmlw_dev, char*, unsigned int);
static nvmlw_ret (*nvmlw_pci_info)(nvmlw_dev, nvmlw_pci*);
static nvmlw_ret (*nvmlw_numa)(nvmlw_dev, unsigned int*);
static nvmlw_ret (*nvmlw_link_state)(nvmlw_dev, unsigned int, int*);
static nvmlw_ret (*nvmlw_link_pci)(nvmlw_dev, unsigned int, nvmlw_pci*);
static nvmlw_ret (*nvmlw_link_type)(nvmlw_dev, unsigned int, int*);
static nvmlw_ret (*nvmlw_mps_procs)(nvmlw_dev, unsigned int*, nvmlw_proc*);

// Loads the library and its symbols once; returns NULL or why it could not.
static const char* nvmlw_load(void) {
	if (nvmlw_handle != NULL) {
		return NULL;
	}
	void* h = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
	if (h == NULL) {
		const char* err = dlerror();
		return err != NULL ? err : "dlopen libnvidia-ml.so.1 failed";
	}
#define NVMLW_SYM(slot, name) *(void**)(&slot) = dlsym(h, name)
	NVMLW_SYM(nvmlw_init, "nvmlInit_v2");
	NVMLW_SYM(nvmlw_shutdown, "nvmlShutdown");
	NVMLW_SYM(nvmlw_error_string, "nvmlErrorString");
	NVMLW_SYM(nvmlw_count, "nvmlDeviceGetCount_v2");
	NVMLW_SYM(nvmlw_by_index, "nvmlDeviceGetHandleByIndex_v2");
	NVMLW_SYM(nvmlw_name, "nvmlDeviceGetName");
	NVMLW_SYM(nvmlw_uuid, "nvmlDeviceGetUUID");
	NVMLW_SYM(nvmlw_pci_info, "nvmlDeviceGetPciInfo_v3");
	NVMLW_SYM(nvmlw_numa, "nvmlDeviceGetNumaNodeId");
	NVMLW_SYM(nvmlw_link_state, "nvmlDeviceGetNvLinkState");
	NVMLW_SYM(nvmlw_link_pci, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
	NVMLW_SYM(nvmlw_link_type, "nvmlDeviceGetNvLinkRemoteDeviceType");
	NVMLW_SYM(nvmlw_mps_procs, "nvmlDeviceGetMPSComputeRunningProcesses_v3");
	if (nvmlw_mps_procs == NULL) NVMLW_SYM(nvmlw_mps_procs, "nvmlDeviceGetMPSComputeRunningProcesses_v2");
#undef NVMLW_SYM
	if (nvmlw_init == NULL || nvmlw_shutdown == NULL || nvmlw_count == NULL ||
	    nvmlw_by_index == NULL || nvmlw_name == NULL || nvmlw_pci_info == NULL) {
		dlclose(h);
		return "libnvidia-ml.so.1 lacks nvmlInit_v2 or another basic entry point (driver too old)";
	}
	nvmlw_handle = h;
	return NULL;
}

// Each wrapper returns NVMLW_FUNCTION_NOT_FOUND if the driver lacks the entry point.
static nvmlw_ret nvmlw_call_init(void) { return nvmlw_init(); }
static nvmlw_ret nvmlw_call_shutdown(void) { return nvmlw_shutdown(); }
static const char* nvmlw_call_error_string(nvmlw_ret r) {
	return nvmlw_error_string != NULL ? nvmlw_error_string(r) : NULL;
}
static nvmlw_ret nvmlw_call_count(unsigned int* n) { return nvmlw_count(n); }
static nvmlw_ret nvmlw_call_by_index(unsigned int i, nvmlw_dev* d) { return nvmlw_by_index(i, d); }
static nvmlw_ret nvmlw_call_name(nvmlw_dev d, char* buf, unsigned int n) { return nvmlw_name(d, buf, n); }
static nvmlw_ret nvmlw_call_uuid(nvmlw_dev d, char* buf, unsigned int n) {
	return nvmlw_uuid != NULL ? nvmlw_uuid(d, buf, n) : NVMLW_FUNCTION_NOT_FOUND;
}
static nvmlw_ret nvmlw_call_bus_id(nvmlw_dev d, char* buf, unsigned int n) {
	nvmlw_pci p;
	memset(&p, 0, sizeof p);
	nvmlw_ret r = nvmlw_pci_info(d, &p);
	if (r == NVMLW_SUCCESS) {
		strncpy(buf, p.busId, n - 1);
		buf[n - 1] = 0;
	}
	return r;
}
static nvmlw_ret nvmlw_call_numa(nvmlw_dev d, unsigned int* node) {
	return nvmlw_numa != NULL ? nvmlw_numa(d, node) : NVMLW_FUNCTION_NOT_FOUND;
}
static nvmlw_ret nvmlw_call_link_state(nvmlw_dev d, unsigned int link, int* active) {
	return nvmlw_link_state != NULL ? nvmlw_link_state(d, link, active) : NVMLW_FUNCTION_NOT_FOUND;
}
static nvmlw_ret nvmlw_call_link_bus_id(nvmlw_dev d, unsigned int link, char* buf, unsigned int n) {
	if (nvmlw_link_pci == NULL) {
		return NVMLW_FUNCTION_NOT_FOUND;
	}
	nvmlw_pci p;
	memset(&p, 0, sizeof p);
	nvmlw_ret r = nvmlw_link_pci(d, link, &p);
	if (r == NVMLW_SUCCESS) {
		strncpy(buf, p.busId, n - 1);
		buf[n - 1] = 0;
	}
	return r;
}
static nvmlw_ret nvmlw_call_link_type(nvmlw_dev d, unsigned int link, int* kind) {
	return nvmlw_link_type != NULL ? nvmlw_link_type(d, link, kind) : NVMLW_FUNCTION_NOT_FOUND;
}
// The pids of the MPS clients on d, up to cap of them, into pids; *n is how many
// there are (more than cap: NVMLW_INSUFFICIENT_SIZE).
static nvmlw_ret nvmlw_call_mps_pids(nvmlw_dev d, unsigned int cap, unsigned int* pids, unsigned int* n) {
	if (nvmlw_mps_procs == NULL) {
		return NVMLW_FUNCTION_NOT_FOUND;
	}
	nvmlw_proc* p = calloc(cap ? cap : 1, sizeof *p);
	if (p == NULL) {
		return NVMLW_INSUFFICIENT_SIZE;
	}
	*n = cap;
	nvmlw_ret r = nvmlw_mps_procs(d, n, p);
	for (unsigned int i = 0; r == NVMLW_SUCCESS && i < *n && i < cap; i++) {
		pids[i] = p[i].pid;
	}
	free(p);
	return r;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/gonccl/gonccl/cuda/driver"
)

// nvmlMu serialises every call into the dlopen backend: loading it, and NVML itself
// (initialised and shut down per Describe).
var nvmlMu sync.Mutex

// dynamicNVML is the NVML backend of a real machine: libnvidia-ml.so.1, dlopen'ed.
type dynamicNVML struct{}

func newDynamicNVML() NVML { return dynamicNVML{} }

// nvmlError turns an nvmlReturn_t into an error wrapping the sentinels Topology
// understands.
func nvmlError(call string, r C.nvmlw_ret) error {
	if r == C.NVMLW_SUCCESS {
		return nil
	}
	msg := "NVML error " + strconv.Itoa(int(r))
	if s := C.nvmlw_call_error_string(r); s != nil {
		msg = C.GoString(s)
	}
	switch r {
	case C.NVMLW_NOT_SUPPORTED, C.NVMLW_FUNCTION_NOT_FOUND:
		return fmt.Errorf("%s: %s: %w", call, msg, ErrNVMLNotSupported)
	case C.NVMLW_INVALID_ARGUMENT:
		return fmt.Errorf("%s: %s: %w", call, msg, ErrNVMLInvalidArgument)
	}
	return fmt.Errorf("%s: %s", call, msg)
}

func (dynamicNVML) Init() error {
	nvmlMu.Lock()
	defer nvmlMu.Unlock()
	if why := C.nvmlw_load(); why != nil {
		return errors.New(C.GoString(why))
	}
	return nvmlError("nvmlInit_v2", C.nvmlw_call_init())
}

func (dynamicNVML) Shutdown() error {
	nvmlMu.Lock()
	defer nvmlMu.Unlock()
	return nvmlError("nvmlShutdown", C.nvmlw_call_shutdown())
}

func (dynamicNVML) DeviceCount() (int, error) {
	var n C.uint
	if err := nvmlError("nvmlDeviceGetCount_v2", C.nvmlw_call_count(&n)); err != nil {
		return 0, err
	}
	return int(n), nil
}

func (dynamicNVML) Device(index int) (NVMLDevice, error) {
	var d C.nvmlw_dev
	if err := nvmlError("nvmlDeviceGetHandleByIndex_v2", C.nvmlw_call_by_index(C.uint(index), &d)); err != nil {
		return nil, err
	}
	return dynamicDevice{d}, nil
}

// dynamicDevice is an nvmlDevice_t: a handle NVML owns, not Go memory.
type dynamicDevice struct{ h C.nvmlw_dev }

// nvmlString calls fill with a C buffer of 96 bytes (NVML's largest name, UUID and bus
// id sizes) and returns the string it wrote.
func nvmlString(call string, fill func(*C.char, C.uint) C.nvmlw_ret) (string, error) {
	const size = 96
	buf := (*C.char)(C.calloc(size, 1))
	defer C.free(unsafe.Pointer(buf))
	if err := nvmlError(call, fill(buf, size)); err != nil {
		return "", err
	}
	return C.GoString(buf), nil
}

func (d dynamicDevice) Name() (string, error) {
	return nvmlString("nvmlDeviceGetName", func(b *C.char, n C.uint) C.nvmlw_ret { return C.nvmlw_call_name(d.h, b, n) })
}

func (d dynamicDevice) UUID() (string, error) {
	return nvmlString("nvmlDeviceGetUUID", func(b *C.char, n C.uint) C.nvmlw_ret { return C.nvmlw_call_uuid(d.h, b, n) })
}

func (d dynamicDevice) PCIBusID() (string, error) {
	return nvmlString("nvmlDeviceGetPciInfo_v3", func(b *C.char, n C.uint) C.nvmlw_ret { return C.nvmlw_call_bus_id(d.h, b, n) })
}

// NUMANode asks NVML (drivers from 2023 on), else the kernel (sysfs numa_node).
func (d dynamicDevice) NUMANode() (int, error) {
	var node C.uint
	err := nvmlError("nvmlDeviceGetNumaNodeId", C.nvmlw_call_numa(d.h, &node))
	if err == nil {
		return int(node), nil
	}
	if !errors.Is(err, ErrNVMLNotSupported) {
		return -1, err
	}
	bus, berr := d.PCIBusID()
	if berr != nil {
		return -1, err
	}
	raw, rerr := os.ReadFile("/sys/bus/pci/devices/" + driver.NormalizeBusID(bus) + "/numa_node")
	if rerr != nil {
		return -1, err
	}
	n, perr := strconv.Atoi(strings.TrimSpace(string(raw)))
	if perr != nil {
		return -1, err
	}
	return n, nil
}

func (d dynamicDevice) NVLinkActive(link int) (bool, error) {
	var active C.int
	if err := nvmlError("nvmlDeviceGetNvLinkState", C.nvmlw_call_link_state(d.h, C.uint(link), &active)); err != nil {
		return false, err
	}
	return active != 0, nil
}

func (d dynamicDevice) NVLinkRemote(link int) (string, LinkPeer, error) {
	bus, err := nvmlString("nvmlDeviceGetNvLinkRemotePciInfo_v2", func(b *C.char, n C.uint) C.nvmlw_ret {
		return C.nvmlw_call_link_bus_id(d.h, C.uint(link), b, n)
	})
	if err != nil {
		return "", LinkPeerUnknown, err
	}
	var kind C.int
	if err := nvmlError("nvmlDeviceGetNvLinkRemoteDeviceType", C.nvmlw_call_link_type(d.h, C.uint(link), &kind)); err != nil {
		if errors.Is(err, ErrNVMLNotSupported) {
			return bus, LinkPeerUnknown, nil
		}
		return "", LinkPeerUnknown, err
	}
	return bus, LinkPeer(kind), nil
}

// MPSProcesses lists the pids of the MPS clients on the device
// (nvmlDeviceGetMPSComputeRunningProcesses_v3, or _v2 on older drivers).
func (d dynamicDevice) MPSProcesses() ([]int, error) {
	for capacity := 64; ; capacity *= 4 {
		pids := make([]C.uint, capacity)
		var n C.uint
		r := C.nvmlw_call_mps_pids(d.h, C.uint(capacity), &pids[0], &n)
		if r == C.NVMLW_INSUFFICIENT_SIZE && capacity < 1<<16 {
			continue
		}
		if err := nvmlError("nvmlDeviceGetMPSComputeRunningProcesses_v3", r); err != nil {
			return nil, err
		}
		out := make([]int, 0, int(n))
		for _, p := range pids[:min(int(n), capacity)] {
			out = append(out, int(p))
		}
		return out, nil
	}
}
