"""How a phase process starts: a fresh interpreter or a fork of a preloaded one, its log, its
lifetime and its descendants. No torch in the controller.
"""
