"""The two names that tie the language, the passes and the decoder together, Triton-free.

``INSTRUMENTATION_MODE``: the value of Triton's ``instrumentation_mode`` compile option that
asks for proton_lite's pass. ``MARKER_TAG``: the tag of the inline-asm markers that
``proton_lite.language`` leaves in the IR and the PTX pass replaces. They live here, not in
``language`` (which imports Triton), so that reading a capture never loads Triton.
"""
INSTRUMENTATION_MODE = "proton_lite"
MARKER_TAG = "@@proton_lite"
