extern "C" const char* tw_error_string(int err) { return cudaGetErrorString((cudaError_t)err); }
