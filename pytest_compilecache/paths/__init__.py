"""The warm-start paths (--compile-cache-via): the phases each plans and judges, and what the
child loads, compiles and saves for each.
"""
