package kernels

// KernelNames lists the name of every kernel ReduceInto, DivideBy and ReduceMany launch.
func KernelNames() []string {
	var names []string
	for _, k := range kernelKeys() {
		names = append(names, kernelName(k))
	}
	return names
}

// Fatbin is the embedded kernel image.
var Fatbin = fatbin
