# tapegrad_gpu_visible(<var>): sets <var> ON when this machine shows an NVIDIA GPU: a device node
# (/dev/nvidia0, ...) or a GPU in `nvidia-smi -L`. It asks no compiler.
function(tapegrad_gpu_visible out)
  file(GLOB device_nodes /dev/nvidia[0-9]*)
  set(visible OFF)
  if(device_nodes)
    set(visible ON)
  else()
    find_program(TAPEGRAD_NVIDIA_SMI nvidia-smi)
    if(TAPEGRAD_NVIDIA_SMI)
      execute_process(COMMAND ${TAPEGRAD_NVIDIA_SMI} -L OUTPUT_VARIABLE gpus RESULT_VARIABLE status
                      ERROR_QUIET TIMEOUT 20)
      if(status EQUAL 0 AND gpus MATCHES "GPU [0-9]")
        set(visible ON)
      endif()
    endif()
  endif()
  set(${out} ${visible} PARENT_SCOPE)
endfunction()
